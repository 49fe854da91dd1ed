"""The second turn of a conversation: how much of its prompt the engine has cached, kept by the gateway
(the Responses API's ``previous_response_id``) or resent by the app (a chat app sending the whole
conversation again).

Each conversation: the agent's instructions (shared by all), a first user turn with a document of its own
(so only its own first turn can be cached for it), the model's answer (greedy, a fixed length), then a
second question. Two apps send the same conversations through one prefixgate in front of one real vLLM
CPU engine:
  responses: turn 1 ``POST /v1/responses``; turn 2 only the new question and ``previous_response_id``;
  chat:      turn 1 ``POST /v1/chat/completions``; turn 2 every message again, the first answer as the
             assistant's message.
Two kinds of instructions: ``plain``, and ``clock``, which starts with the current time (a later time on
the second turn, as an app that writes the time into each request does). The gateway moves that reading to
the note on the last user turn; the Responses conversation keeps its first turn exactly as the engine saw
it, note included, where the chat app's resent first turn no longer has it.
The hit rate is vLLM's own (prefix_cache_hits over prefix_cache_queries, in prompt tokens), over the
second turns only; the engine's cache is reset before each cell and the rounds interleave the cells.
Writes docs/responses_turns.json and the ``responses_turns`` block of docs/benchmarks.md.

    python tests/bench/responses_turns.py [--conversations 12] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench import machine  # noqa: E402
from tests.bench.prefix_reuse import (  # noqa: E402
    BASE_TIME,
    _prose,
    _spread,
    agent_system,
    engine_counters,
    start_engine_on_own_core,
)
from tests.bench.processes import start_gateway, stop_gateway  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402

Body = dict[str, Any]
OUTPUT_TOKENS = 48


def instructions(kind: str, rules: str, turn: int, conversation: int) -> str:
    if kind == "plain":
        return rules
    stamp = (BASE_TIME + timedelta(minutes=conversation * 10 + turn)).strftime("%Y-%m-%d %H:%M:%S")
    return f"Current time: {stamp} UTC\n{rules}"


def first_question(conversation: int, sentences: int) -> str:
    document = _prose(random.Random(1000 + conversation), sentences)
    return f"Here is our plan, document {conversation}:\n{document}\n\nWhat is the riskiest step in it?"


SECOND = "And what should we do first?"


def _first_event(response: httpx.Response, prefix: str, started: float) -> float:
    """Seconds from ``started`` (the request sent) to the first line starting with ``prefix``."""
    first = None
    for line in response.iter_lines():
        if first is None and line.startswith(prefix):
            first = time.perf_counter() - started
    assert first is not None, "stream without a token"
    return first


def responses_conversation(client: httpx.Client, base: str, engine: str, model: str, system: Callable[[int], str],
                           question: str) -> tuple[float, float, float]:
    """Turn 1, then turn 2 by ``previous_response_id``: (turn 2's TTFT, its hit tokens, its query tokens)."""
    common = {"model": model, "max_output_tokens": OUTPUT_TOKENS, "temperature": 0, "ignore_eos": True}
    first = client.post(base + "/responses", json={**common, "instructions": system(1), "input": question})
    first.raise_for_status()
    hits0, queries0 = engine_counters(engine)
    body = {**common, "instructions": system(2), "input": SECOND, "previous_response_id": first.json()["id"],
            "stream": True}
    started = time.perf_counter()
    with client.stream("POST", base + "/responses", json=body) as response:
        response.raise_for_status()
        ttft = _first_event(response, "event: response.output_text.delta", started)
    hits1, queries1 = engine_counters(engine)
    return ttft, hits1 - hits0, queries1 - queries0


def chat_conversation(client: httpx.Client, base: str, engine: str, model: str, system: Callable[[int], str],
                      question: str) -> tuple[float, float, float]:
    """Turn 1, then turn 2 with every message again: (turn 2's TTFT, its hit tokens, its query tokens)."""
    common = {"model": model, "max_tokens": OUTPUT_TOKENS, "temperature": 0, "ignore_eos": True}
    turn = [{"role": "user", "content": question}]
    first = client.post(base + "/chat/completions",
                        json={**common, "messages": [{"role": "system", "content": system(1)}, *turn]})
    first.raise_for_status()
    answer = first.json()["choices"][0]["message"]["content"]
    hits0, queries0 = engine_counters(engine)
    messages = [{"role": "system", "content": system(2)}, *turn, {"role": "assistant", "content": answer},
                {"role": "user", "content": SECOND}]
    started = time.perf_counter()
    with client.stream("POST", base + "/chat/completions",
                       json={**common, "messages": messages, "stream": True}) as response:
        response.raise_for_status()
        ttft = _first_event(response, "data: {", started)
    hits1, queries1 = engine_counters(engine)
    return ttft, hits1 - hits0, queries1 - queries0


APPS = {"responses": responses_conversation, "chat": chat_conversation}


def run_cell(client: httpx.Client, engine: str, base: str, model: str, app: str, kind: str, rules: str,
             conversations: int, sentences: int) -> Body:
    client.post(engine + "/reset_prefix_cache", timeout=30).raise_for_status()
    ttfts, hits, queries = [], 0.0, 0.0
    for index in range(conversations):
        def system(turn: int, index: int = index) -> str:
            return instructions(kind, rules, turn, index)
        ttft, hit, query = APPS[app](client, base, engine, model, system, first_question(index, sentences))
        ttfts.append(ttft * 1000)
        hits, queries = hits + hit, queries + query
    return {"hit_rate": hits / max(queries, 1), "prompt_tokens": queries / conversations,
            "ttft_mean_ms": statistics.fmean(ttfts)}


def markdown(results: list[Body], meta: Body) -> str:
    lines = [f"Run of {meta['date']} on {meta['where']}; {meta['rounds']} rounds of {meta['conversations']} "
             f"two-turn conversations per cell from a cold cache, one at a time; engine block size "
             f"{meta['block_size']} tokens; {OUTPUT_TOKENS} output tokens a turn. Second turns only: engine hit "
             "rate and TTFT, median of the rounds (range).", "",
             "| instructions | app | second turn's prompt tokens | engine hit rate | responses / chat, per round | "
             "TTFT mean (ms) |", "|---|---|---|---|---|---|"]
    for kind in ("plain", "clock"):
        cells = {r["app"]: r for r in results if r["instructions"] == kind}
        ratios = [r["hit_rate"] / max(c["hit_rate"], 1e-9)
                  for r, c in zip(cells["responses"]["runs"], cells["chat"]["runs"], strict=True)]
        for app in ("responses", "chat"):
            runs = cells[app]["runs"]
            ratio = _spread(ratios, ".2f", "x") if app == "responses" else "-"
            lines.append(f"| {kind} | {app} | {statistics.median(r['prompt_tokens'] for r in runs):.0f} | "
                         f"{_spread([r['hit_rate'] for r in runs], '.3f')} | {ratio} | "
                         f"{_spread([r['ttft_mean_ms'] for r in runs], '.1f')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=24, help="size of each first turn's document")
    parser.add_argument("--model", default="prefixgate-tiny")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="responses-turns-"))
    engine = start_engine_on_own_core(args.model, workdir)
    process, origin = start_gateway({"pools": [{"name": "bench", "replicas": [engine.base_url],
                                                "models": [args.model]}]}, workdir)
    rules = agent_system(random.Random(11), 12)
    runs: dict[tuple[str, str], list[Body]] = {}
    try:
        with httpx.Client(timeout=120) as client:
            for index in range(3):  # one-off costs of the first requests stay out of the cells
                chat_conversation(client, origin + "/v1", engine.origin, args.model,
                                  lambda turn: rules, first_question(100 + index, 4))
            metrics = client.get(engine.origin + "/metrics").text
            block_size = int(next(line.split('block_size="')[1].split('"')[0] for line in metrics.splitlines()
                                  if line.startswith("vllm:cache_config_info") and 'block_size="' in line))
            for number in range(args.rounds):
                for kind in ("plain", "clock"):
                    for app in APPS:
                        run = run_cell(client, engine.origin, origin + "/v1", args.model, app, kind, rules,
                                       args.conversations, args.sentences)
                        runs.setdefault((kind, app), []).append(run)
                        print(f"round {number + 1}", kind, app, json.dumps(run), flush=True)
    finally:
        stop_gateway(process)
        engine.stop()
    results = [{"instructions": kind, "app": app, "runs": cell} for (kind, app), cell in runs.items()]
    meta = {"date": datetime.now().strftime("%Y-%m-%d"), "conversations": args.conversations, "rounds": args.rounds,
            "block_size": block_size, "where": f"{machine.machine()}, {machine.vllm_version()}, tiny model"}
    table = markdown(results, meta)
    print(table)
    out = Path(args.out)
    write_result(out, "responses_turns", meta, results)
    write_block(out, "responses_turns", table)


if __name__ == "__main__":
    main()
