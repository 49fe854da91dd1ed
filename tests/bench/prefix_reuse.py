"""Prefix-cache reuse on a real vLLM engine, sent directly and through prefixgate (issue 3).

Two agent workloads, each in a "static" variant (the volatile values never change) and a "dynamic"
one (fresh values on every request), each sent straight to vLLM and through prefixgate:
  (a) one multi-turn conversation sent N times with a timestamp prepended to its first user
      message (dynamic: a different time each request; static: the same one);
  (b) a ~1,500-token agent system prompt with a tool schema, a `Current time:` line and a trace ID
      at its top, and a different user question each request (dynamic: fresh time and ID each).
The dynamic variants also go through a second prefixgate that strips labelled IDs
(prompt.actions {id: strip}) instead of moving them to the note.
Before each cell the engine's prefix cache is reset (vLLM's dev endpoint POST /reset_prefix_cache).
Reported per cell: vLLM's own hit rate (deltas of vllm:prefix_cache_hits_total over
vllm:prefix_cache_queries_total, both counted in prompt tokens) and the client's time to first token
(mean, p95), requests sent one after another so TTFT is prefill time, not queueing. Several rounds
interleave all cells; the local engine's compute threads get their own core. Writes the table into
docs/benchmarks.md, the numbers to docs/prefix_reuse.json and a plot to docs/prefix_reuse.png
(matplotlib: pip install -e '.[bench]').

    python tests/bench/prefix_reuse.py [--requests 100] [--out docs/benchmarks.md]
    python tests/bench/prefix_reuse.py --engine http://HOST:8000 --model NAME   # an engine you run
    bash tests/bench/gpu_prefix_reuse.sh   # on a GPU machine: see that script
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.prompt.cache_salt import tenant_salt  # noqa: E402
from policies.prompt.prompt import PromptPolicy, rewrite_chat  # noqa: E402
from proxy.config.gateway import OPEN_TENANT  # noqa: E402
from proxy.engine.process import LocalEngine, free_port  # noqa: E402
from proxy.engine.tiny_model import ensure_tiny_model  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.processes import BENCH_SALT_SECRET  # noqa: E402
from tests.bench.processes import start_gateway as start_prefixgate  # noqa: E402
from tests.bench.report import publish  # noqa: E402
from tests.support.metrics_text import sample_sum  # noqa: E402

Body = dict[str, Any]
BASE_TIME = datetime(2026, 11, 22, 9, 30, 0)

_TOPICS = ("onboarding", "pricing", "retention", "referrals", "webinars", "email funnels", "landing pages",
           "customer interviews", "launch timing", "case studies", "community", "partnerships")
_VERBS = ("map", "test", "measure", "shorten", "segment", "rewrite", "schedule", "review", "compare", "automate")
_OBJECTS = ("the signup flow", "each campaign", "the offer page", "weekly reports", "trial users", "the launch plan",
            "churn reasons", "the pricing table", "support tickets", "the content calendar")


def _prose(rng: random.Random, sentences: int) -> str:
    """Plain English-like filler; deterministic for a seed, so every run sends the same prompts."""
    out = []
    for _ in range(sentences):
        out.append(f"To improve {rng.choice(_TOPICS)}, {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} and then "
                   f"{rng.choice(_VERBS)} {rng.choice(_OBJECTS)} before the next review.")
    return " ".join(out)


def conversation(turns: int, sentences: int) -> list[dict[str, str]]:
    rng = random.Random(7)
    messages = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn + 1}: how should a growth team approach "
                                                    f"{rng.choice(_TOPICS)} for its clients?"})
        answer = "\n".join(f"{n}. {_prose(rng, 2)}" for n in range(1, sentences // 2 + 1))
        messages.append({"role": "assistant", "content": "Here is a plan:\n" + answer})
    messages.append({"role": "user", "content": "Now summarize all of that in five bullet points."})
    return messages


AGENT_TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{description} Returns JSON.",
    "parameters": {"type": "object", "properties": {
        "order_id": {"type": "string", "description": "The order number, as the customer gives it."},
        "include_history": {"type": "boolean", "description": "Also return earlier events."}},
        "required": ["order_id"]}}}
    for name, description in (("get_order", "Looks up an order."), ("track_parcel", "Finds a parcel."),
                              ("open_ticket", "Opens a support ticket."))]


def agent_system(rng: random.Random, sentences: int) -> str:
    rules = "\n".join(f"- {_prose(rng, 1)}" for _ in range(sentences))
    return ("You are the ACME support agent. Use the tools to look things up; never invent order data.\n"
            "Rules:\n" + rules)


def workload_a(dynamic: bool, turns: int, sentences: int) -> Callable[[int], Body]:
    messages = conversation(turns, sentences)

    def body(index: int) -> Body:
        stamp = (BASE_TIME - timedelta(days=index if dynamic else 0)).strftime("%Y-%m-%d %H:%M:%S")
        first = {**messages[0], "content": f"{stamp} {messages[0]['content']}"}
        return {"messages": [first, *messages[1:]]}
    return body


def workload_b(dynamic: bool, sentences: int) -> Callable[[int], Body]:
    rules = agent_system(random.Random(11), sentences)

    def body(index: int) -> Body:
        seed = index if dynamic else 0
        stamp = (BASE_TIME + timedelta(minutes=seed, seconds=seed * 7)).strftime("%Y-%m-%d %H:%M:%S")
        trace = uuid.UUID(int=random.Random(seed).getrandbits(128)).hex
        system = f"Current time: {stamp} UTC\ntrace_id={trace}\n{rules}"
        # tool_choice "none": the tiny engine runs without a tool-call parser; the tools are still rendered.
        return {"tools": AGENT_TOOLS, "tool_choice": "none", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Where is my order {40_000 + index * 37}? It was due last week."}]}
    return body


def as_rewritten(make: Callable[[int], Body]) -> Callable[[int], Body]:
    """What prefixgate (open mode, scope history, default cache_salt isolate) sends for ``make``'s bodies."""
    policy = PromptPolicy(scope="history")
    salt = tenant_salt(BENCH_SALT_SECRET.encode(), OPEN_TENANT)
    return lambda index: {**rewrite_chat(make(index), policy).body, "cache_salt": salt}


def start_engine_on_own_core(model: str, workdir: Path) -> LocalEngine:
    """The tiny model on a local vLLM CPU engine with the dev endpoints (POST /reset_prefix_cache).

    The engine process gets the last core, this process (and the gateway it starts) the others, as on
    a real deployment where the engine has its own hardware (with all on both cores, the gateway
    waited on engine threads and TTFT through it blurred by several ms).
    """
    model_dir = ensure_tiny_model(Path(os.environ.get("PREFIXGATE_DATA_DIR", workdir)))
    cores = sorted(os.sched_getaffinity(0))
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if len(cores) >= 2:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[-1])
        os.sched_setaffinity(0, set(cores[:-1]))
    engine = LocalEngine(model_dir, served_model_name=model, port=free_port(),
                         log_path=workdir / "engine.log", extra_env=env)
    engine.start()
    if len(cores) >= 2 and engine.pid is not None:
        os.sched_setaffinity(engine.pid, {cores[-1]})  # threads it starts later inherit this
    engine.wait_ready(300)
    return engine


def engine_counters(engine: str) -> tuple[float, float]:
    text = httpx.get(engine + "/metrics", timeout=10).text
    return sample_sum(text, "vllm:prefix_cache_hits_total"), sample_sum(text, "vllm:prefix_cache_queries_total")


def ttft(client: httpx.Client, base_url: str, body: Body) -> float:
    started = time.perf_counter()
    with client.stream("POST", base_url + "/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{base_url}: {response.status_code} {response.read()[:300]!r}")
        first = None
        for line in response.iter_lines():
            if first is None and line.startswith("data: {"):
                first = time.perf_counter() - started
        assert first is not None, "stream without a chunk"
        return first


def run_cell(client: httpx.Client, engine: str, base_url: str, make: Callable[[int], Body], requests: int,
             model: str, output_tokens: int) -> tuple[list[float], float, float]:
    """One pass from a cold cache: (TTFT samples in ms, prefix-cache hit tokens, query tokens)."""
    reset = client.post(engine + "/reset_prefix_cache", timeout=30)
    reset.raise_for_status()
    hits0, queries0 = engine_counters(engine)
    samples = []
    for index in range(requests):
        body = {**make(index), "model": model, "stream": True, "max_tokens": output_tokens,
                "ignore_eos": True, "temperature": 0}
        samples.append(ttft(client, base_url, body) * 1000)
    hits1, queries1 = engine_counters(engine)
    return samples, hits1 - hits0, queries1 - queries0


def summarize(samples: list[float], hits: float, queries: float, requests: int) -> dict[str, float]:
    samples = sorted(samples)
    return {"hit_rate": hits / max(queries, 1), "ttft_mean_ms": statistics.fmean(samples),
            "ttft_p50_ms": samples[len(samples) // 2],
            "ttft_p95_ms": samples[int(len(samples) * 0.95) - 1], "prompt_tokens": queries / requests}


def start_gateway(engine_base: str, model: str, workdir: Path, name: str = "prefixgate",
                  actions: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """prefixgate in front of the engine; ``actions`` are its ``prompt.actions`` (e.g. ``{"id": "strip"}``)."""
    process, origin = start_prefixgate({
        "pools": [{"name": "bench", "replicas": [engine_base], "models": [model]}],
        # workload (a) puts its timestamp in the first user turn
        "prompt": {"scope": "history", "actions": actions or {}},
    }, workdir, name)
    return process, origin + "/v1"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"({r['workload'].split(':')[0]}) {r['variant']}\n{r['via'].replace(', ', chr(10))}" for r in results]
    colors = [{"direct": "#8c8c8c", "prefixgate": "#2b7bb9", STRIPPED: "#08306b"}.get(r["via"], "#9ecae1")
              for r in results]
    figure, (rate_axis, ttft_axis) = plt.subplots(1, 2, figsize=(16, 4.6))
    for axis, key, scale in ((rate_axis, "hit_rate", 100), (ttft_axis, "ttft_mean_ms", 1)):
        per_round = [[run[key] * scale for run in r["runs"]] for r in results]
        middle = [statistics.median(values) for values in per_round]
        axis.bar(labels, middle, color=colors,
                 yerr=[[m - min(v) for m, v in zip(middle, per_round, strict=True)],
                       [max(v) - m for m, v in zip(middle, per_round, strict=True)]], capsize=3)
    rate_axis.set_ylabel("vLLM prefix-cache hit rate (%), median of rounds")
    rate_axis.set_ylim(0, 100)
    ttft_axis.set_ylabel("client TTFT mean (ms), median of rounds")
    for axis in (rate_axis, ttft_axis):
        axis.tick_params(axis="x", labelsize=6.5)
    figure.suptitle("Prefix reuse: direct to vLLM (grey), through prefixgate (blue; dark: IDs stripped), "
                    "prefixgate's rewritten body sent directly (light blue)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


STRIPPED = "prefixgate, IDs stripped"  # prompt.actions {id: strip}


def _spread(values: list[float], fmt: str, unit: str = "") -> str:
    """``values``' median with their range: how a figure from several rounds is quoted."""
    return (f"{format(statistics.median(values), fmt)}{unit} "
            f"({format(min(values), fmt)}-{format(max(values), fmt)})")


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Run of {meta['date']} on {meta['where']}; {meta['rounds']} rounds of {meta['requests']} requests per "
             f"cell from a cold cache, one request at a time, {meta['output_tokens']} output tokens; engine block size "
             f"{meta['block_size']} tokens. Hit rate and TTFT mean: the median of the rounds (range); "
             "p50 and p95 over all rounds' requests.", "",
             "| workload | variant | via | prompt tokens | hit rate | TTFT mean (ms) | TTFT p50 (ms) | TTFT p95 (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        rounds = r["runs"]
        lines.append(f"| {r['workload']} | {r['variant']} | {r['via']} | {r['prompt_tokens']:.0f} | "
                     f"{_spread([run['hit_rate'] for run in rounds], '.3f')} | "
                     f"{_spread([run['ttft_mean_ms'] for run in rounds], '.1f')} | {r['ttft_p50_ms']:.1f} | "
                     f"{r['ttft_p95_ms']:.1f} |")
    lines += ["",
              "Dynamic through prefixgate against static, each ratio taken within a round (median of the rounds, "
              "range), and where its extra TTFT over direct static goes (medians of the rounds):",
              "", "| workload | dynamic via | hit rate vs direct static | vs static through prefixgate | "
              "TTFT vs direct static | vs static through prefixgate | + prompt (rewritten body, direct) | "
              "+ hop (through prefixgate) |", "|---|---|---|---|---|---|---|---|"]
    for workload in sorted({r["workload"] for r in results}):
        cell = {(r["variant"], r["via"]): r["runs"] for r in results if r["workload"] == workload}
        for via in ("prefixgate", STRIPPED):
            if ("dynamic", via) not in cell:  # a result file from before the stripped cell
                continue
            rounds = list(zip(cell[("static", "direct")], cell[("dynamic", via)], cell[("static", "prefixgate")],
                              cell[("dynamic", "direct, rewritten")], strict=True))
            hit_vs_base = [ours["hit_rate"] / max(base["hit_rate"], 1e-9) for base, ours, _, _ in rounds]
            hit_vs_static = [ours["hit_rate"] / max(static["hit_rate"], 1e-9) for _, ours, static, _ in rounds]
            ttft_vs_base = [ours["ttft_mean_ms"] / base["ttft_mean_ms"] for base, ours, _, _ in rounds]
            ttft_vs_static = [ours["ttft_mean_ms"] / static["ttft_mean_ms"] for _, ours, static, _ in rounds]
            prompt = [rewritten["ttft_mean_ms"] - base["ttft_mean_ms"] for base, _, _, rewritten in rounds]
            hop = [ours["ttft_mean_ms"] - rewritten["ttft_mean_ms"] for _, ours, _, rewritten in rounds]
            split = (f"{statistics.median(prompt):+.1f} ms | {statistics.median(hop):+.1f} ms" if via == "prefixgate"
                     else "- | -")
            lines.append(
                f"| {workload} | {via} | {_spread(hit_vs_base, '.3f')} | {_spread(hit_vs_static, '.3f')} | "
                f"{_spread(ttft_vs_base, '.2f', 'x')} | {_spread(ttft_vs_static, '.2f', 'x')} | {split} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="passes over all cells, interleaved (TTFT is noisy)")
    parser.add_argument("--output-tokens", type=int, default=8)
    parser.add_argument("--engine", help="origin of a running vLLM engine started with VLLM_SERVER_DEV_MODE=1")
    parser.add_argument("--model", default="prefixgate-tiny")
    parser.add_argument("--turns", type=int, default=5, help="workload (a): conversation turns")
    parser.add_argument("--sentences", type=int, default=10, help="size knob for both workloads")
    parser.add_argument("--where", help="the caption's machine and engine (default: detected at run time)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--name", default="prefix_reuse",
                        help="docs block and file stem (prefix_reuse_gpu for a GPU engine's run)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="prefix-reuse-"))
    engine = None
    if args.engine:
        origin = args.engine.rstrip("/")
        where = args.where or (f"an engine serving {args.model} ({machine.engine_version(origin)}); gateway and "
                               f"client on {machine.machine()}")
    else:
        engine = start_engine_on_own_core(args.model, workdir)
        origin = engine.origin
        where = args.where or (f"{machine.machine()} (engine process on one core; gateway and client on the "
                               f"others), {machine.vllm_version()}, tiny model")
    gateway, gateway_base = start_gateway(origin + "/v1", args.model, workdir)
    # IDs that mean nothing to the model dropped instead of moved to the note (the hit-rate target allows it)
    stripping, stripping_base = start_gateway(origin + "/v1", args.model, workdir, "prefixgate-strip", {"id": "strip"})
    workloads = {
        "a: multi-turn, timestamp in first user turn": lambda dynamic: workload_a(dynamic, args.turns, args.sentences),
        "b: agent system prompt + tools, time + trace ID": lambda dynamic: workload_b(dynamic, args.sentences * 2),
    }
    results = []
    try:
        with httpx.Client(timeout=120) as client:
            warm = workload_b(True, 4)
            for index in range(5):  # first requests after start pay one-off costs; keep them out of the cells
                ttft(client, origin + "/v1", {**warm(index), "model": args.model, "stream": True, "max_tokens": 4})
            metrics = client.get(origin + "/metrics").text
            block_size = next((line.split('block_size="')[1].split('"')[0] for line in metrics.splitlines()
                               if line.startswith("vllm:cache_config_info") and 'block_size="' in line), "?")
            cells = [(name, variant, via, base, make(variant == "dynamic"))
                     for name, make in workloads.items() for variant in ("static", "dynamic")
                     for via, base in (("direct", origin + "/v1"), ("prefixgate", gateway_base))]
            # The body prefixgate sends, sent directly: splits prefixgate's TTFT into the hop and the prompt.
            cells += [(name, "dynamic", "direct, rewritten", origin + "/v1", as_rewritten(make(True)))
                      for name, make in workloads.items()]
            cells += [(name, "dynamic", STRIPPED, stripping_base, make(True)) for name, make in workloads.items()]
            rounds: dict[tuple[str, str, str], list[tuple[list[float], float, float]]] = {}
            for number in range(args.rounds):  # every cell once per round, so drift over the run hits all alike
                for name, variant, via, base, body in cells:
                    measured = run_cell(client, origin, base, body, args.requests, args.model, args.output_tokens)
                    rounds.setdefault((name, variant, via), []).append(measured)
                    print(f"round {number + 1}", name[:2], variant, via,
                          json.dumps(summarize(*measured, args.requests)), flush=True)
            for (name, variant, via), measured in rounds.items():
                pooled = ([ms for samples, _, _ in measured for ms in samples],
                          sum(hits for _, hits, _ in measured), sum(queries for _, _, queries in measured))
                results.append({"workload": name, "variant": variant, "via": via,
                                **summarize(*pooled, args.requests * args.rounds),
                                "runs": [summarize(*one, args.requests) for one in measured]})
    finally:
        for process in (gateway, stripping):
            process.terminate()
            process.wait(30)
        if engine is not None:
            engine.stop()
    meta = {"date": datetime.now().strftime("%Y-%m-%d"), "where": where, "requests": args.requests,
            "rounds": args.rounds,
            "output_tokens": args.output_tokens, "block_size": block_size}
    table = markdown(results, meta)
    print(table)
    publish(Path(args.out), args.name, meta, results, table, "prefix reuse", plot)


if __name__ == "__main__":
    main()
