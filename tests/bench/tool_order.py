"""What keeping the app's tool order costs in prefix-cache hits, and what sorting it (``prompt.sort_tools``) buys.

An agent's requests: a system prompt, eight tools with JSON Schema parameters, and a different question each
time. Two kinds of traffic:
  fixed:   the tools in one order every request, as apps that build them from code send them;
  varying: the same tools in a new order each request (a set gathered from several sources, say).
Each goes through two prefixgate gateways in front of one real vLLM CPU engine: the default (tools as sent)
and one with ``prompt.sort_tools: true``. Before each cell the engine's prefix cache is reset; the hit rate
is vLLM's own (prefix_cache_hits over prefix_cache_queries, in prompt tokens). Rounds interleave the cells.
The same logs also go through ``prefixgate analyze``'s simulation (``proxy.commands.analyze.analyze``) with
the tiny model's tokenizer at the engine's block size, for each setting. Writes docs/tool_order.json and
the ``tool_order`` block of docs/benchmarks.md.

    python tests/bench/tool_order.py [--requests 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.prompt.prompt import PromptPolicy  # noqa: E402
from proxy.commands.analyze import analyze, make_encoder  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.prefix_reuse import _spread, agent_system, run_cell, start_engine_on_own_core, ttft  # noqa: E402
from tests.bench.processes import start_gateway, stop_gateway  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402

Body = dict[str, Any]
_FIELDS = ("order_id", "customer_email", "reason", "amount", "currency", "carrier", "address", "note")


def agent_tools(count: int = 8) -> list[Body]:
    """Tools as an app generates them from code: each with a description and typed, described parameters."""
    rng = random.Random(5)
    names = ("lookup_order", "refund_payment", "track_parcel", "update_address", "cancel_order", "open_ticket",
             "search_catalog", "escalate_to_human")
    tools = []
    for name in names[:count]:
        fields = rng.sample(_FIELDS, 4)
        tools.append({"type": "function", "function": {
            "name": name, "description": f"{name.replace('_', ' ').capitalize()} for the customer in this chat.",
            "parameters": {"type": "object", "required": fields[:2], "properties": {
                field: {"type": "string", "description": f"The {field.replace('_', ' ')} as the customer gave it."}
                for field in fields}}}})
    return tools


def workload(varying: bool, sentences: int) -> Callable[[int], Body]:
    system, tools = agent_system(random.Random(11), sentences), agent_tools()

    def body(index: int) -> Body:
        listed = random.Random(index).sample(tools, len(tools)) if varying else tools
        # tool_choice "none": the bench engine runs without a tool-call parser; the tools are still rendered.
        return {"tools": listed, "tool_choice": "none", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Where is my order {40_000 + index * 37}? It was due last week."}]}
    return body


def simulated(make: Callable[[int], Body], requests: int, tokenizer: Path, block_size: int,
              workdir: Path) -> dict[str, float]:
    """``prefixgate analyze``'s hit rate for the log of ``make``'s bodies, as sent and under each setting."""
    log = workdir / "requests.jsonl"
    log.write_text("".join(json.dumps({"model": "m", **make(index)}) + "\n" for index in range(requests)))
    encode, _ = make_encoder(str(tokenizer), "m")
    rates = {}
    for name, policy in (("default", PromptPolicy()), ("sort_tools", PromptPolicy(sort_tools=True))):
        report = analyze(log, policy, encode, str(tokenizer), block_size)
        rates["as sent"], rates[name] = report.sent.cache.hit_rate, report.rewritten.cache.hit_rate
    return rates


def markdown(results: list[Body], meta: Body) -> str:
    lines = [f"Run of {meta['date']} on {meta['where']}; {meta['rounds']} rounds of {meta['requests']} requests per "
             f"cell from a cold cache, one at a time; engine block size {meta['block_size']} tokens; "
             f"{meta['prompt_tokens']:.0f} prompt tokens per request. Engine hit rate: median of the rounds "
             "(range). Simulated: `prefixgate analyze` on the same requests (tiny model's tokenizer, same block "
             "size, unbounded cache).", "",
             "| tool order | gateway | engine hit rate | sort_tools / default, per round | TTFT mean (ms) | "
             "simulated hit rate |", "|---|---|---|---|---|---|"]
    for traffic in ("fixed", "varying"):
        cells = {r["gateway"]: r for r in results if r["traffic"] == traffic}
        ratios = [s["hit_rate"] / max(d["hit_rate"], 1e-9)
                  for d, s in zip(cells["default"]["runs"], cells["sort_tools"]["runs"], strict=True)]
        for gateway in ("default", "sort_tools"):
            cell = cells[gateway]
            ratio = _spread(ratios, ".2f", "x") if gateway == "sort_tools" else "-"
            hit_rate = _spread([run["hit_rate"] for run in cell["runs"]], ".3f")
            lines.append(f"| {traffic} | {gateway} | {hit_rate} | {ratio} | "
                         f"{_spread([run['ttft_mean_ms'] for run in cell['runs']], '.1f')} | "
                         f"{cell['simulated']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=12, help="size of the agent's system prompt")
    parser.add_argument("--model", default="prefixgate-tiny")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tool-order-"))
    engine = start_engine_on_own_core(args.model, workdir)
    pool = {"pools": [{"name": "bench", "replicas": [engine.base_url], "models": [args.model]}]}
    gateways = {"default": start_gateway(pool, workdir, "default"),
                "sort_tools": start_gateway({**pool, "prompt": {"sort_tools": True}}, workdir, "sort-tools")}
    traffic = {"fixed": workload(False, args.sentences), "varying": workload(True, args.sentences)}
    runs: dict[tuple[str, str], list[Body]] = {}
    try:
        with httpx.Client(timeout=120) as client:
            for index in range(5):  # one-off costs of the first requests stay out of the cells
                ttft(client, engine.base_url, {**traffic["fixed"](index), "model": args.model, "stream": True,
                                               "max_tokens": 4})
            metrics = client.get(engine.origin + "/metrics").text
            block_size = int(next(line.split('block_size="')[1].split('"')[0] for line in metrics.splitlines()
                                  if line.startswith("vllm:cache_config_info") and 'block_size="' in line))
            for number in range(args.rounds):
                for kind, make in traffic.items():
                    for name, (_, origin) in gateways.items():
                        samples, hits, queries = run_cell(client, engine.origin, origin + "/v1", make, args.requests,
                                                          args.model, 4)
                        run = {"hit_rate": hits / max(queries, 1), "prompt_tokens": queries / args.requests,
                               "ttft_mean_ms": statistics.fmean(samples)}
                        runs.setdefault((kind, name), []).append(run)
                        print(f"round {number + 1}", kind, name, json.dumps(run), flush=True)
    finally:
        for process, _ in gateways.values():
            stop_gateway(process)
        engine.stop()
    model_dir = Path(engine.model_dir)
    results = []
    for kind, make in traffic.items():
        rates = simulated(make, args.requests, model_dir, block_size, workdir)
        for name in ("default", "sort_tools"):
            results.append({"traffic": kind, "gateway": name, "runs": runs[(kind, name)], "simulated": rates[name],
                            "simulated_as_sent": rates["as sent"]})
    meta = {"date": datetime.now().strftime("%Y-%m-%d"), "requests": args.requests, "rounds": args.rounds,
            "block_size": block_size, "where": f"{machine.machine()}, {machine.vllm_version()}, tiny model",
            "prompt_tokens": statistics.fmean(run["prompt_tokens"] for r in results for run in r["runs"])}
    table = markdown(results, meta)
    print(table)
    out = Path(args.out)
    write_result(out, "tool_order", meta, results)
    write_block(out, "tool_order", table)


if __name__ == "__main__":
    main()
