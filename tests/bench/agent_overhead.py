"""The gateway CPU of a coding agent's request (Claude Code's first turn, 51 KB: 24 tools, its system blocks,
its reminders) beside a short chat request's, with overhead.py's measurement.

One prefixgate (one uvicorn worker on CPU 0, aiohttp client, defaults: the billing block dropped, the system
text made canonical, the date and the git snapshot moved to the note, the conversation rendered for the pieces)
in front of the fake upstream (CPU 1), which answers both APIs with the same number of tokens: chat as chunks
ending ``[DONE]``, Messages as events ending ``message_stop``. wrk (CPU 1) keeps 64 connections busy, JSON and
streamed; each round sends the chat body and then the agent's body through the same gateway (the order reversed
every other round). Gateway CPU per request = (CPU time of its threads less its idle rate) / requests, as in
tests/bench/overhead.py; the ratio agent / chat is taken within each round. Writes docs/agent_overhead.json and
the ``agent_overhead`` block of docs/benchmarks.md.

    python tests/bench/agent_overhead.py [--seconds 8] [--rounds 3] [--tokens 32]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proxy.engine.process import free_port  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.overhead import (  # noqa: E402
    WRK_SCRIPT,
    Target,
    body,
    idle_cpu_rate,
    measure_closed,
    start,
    start_gateway,
    stop,
    wait_http,
)
from tests.bench.prefix_reuse import _spread  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402

ENDPOINTS = {"chat": "/v1/chat/completions", "agent": "/v1/messages"}
SESSIONS = ROOT / "tests" / "bench" / "agent_sessions" / "claude_code.jsonl.gz"


def agent_body() -> dict[str, Any]:
    """Claude Code's first request of its first captured session."""
    with gzip.open(SESSIONS, "rt") as lines:
        return json.loads(next(lines))["body"]


def payload(endpoint: str, stream: bool, tokens: int) -> dict[str, Any]:
    if endpoint == "chat":
        return body(stream, tokens, 0.0)
    return {**agent_body(), "model": "fake-model", "max_tokens": tokens, "stream": stream}


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Run of {meta['date']} on {meta['where']}; {meta['rounds']} rounds of {meta['seconds']} s per cell, "
             f"wrk with 64 connections, {meta['tokens']} tokens an answer, the fake upstream answering at once; "
             f"gateway idle CPU {meta['idle_ms_per_s']:.2f} ms/s taken off. Median of the rounds (range).", "",
             "| answer | chat CPU/request (ms) | agent CPU/request (ms) | agent / chat, per round | "
             "chat req/s | agent req/s |", "|---|---|---|---|---|---|"]
    for row in rows:
        chat, agent = row["chat"], row["agent"]
        ratios = [a / c for a, c in zip(agent["cpu_ms"], chat["cpu_ms"], strict=True)]
        lines.append(f"| {row['mode']} | {_spread(chat['cpu_ms'], '.3f')} | {_spread(agent['cpu_ms'], '.3f')} | "
                     f"{_spread(ratios, '.2f', 'x')} | {_spread(chat['rps'], '.0f')} | "
                     f"{_spread(agent['rps'], '.0f')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install -y wrk")
    workdir = Path(tempfile.mkdtemp(prefix="pg-agent-bench-"))
    script = workdir / "post.lua"
    script.write_text(WRK_SCRIPT)
    rows = []
    with ExitStack() as stack:
        fake_port = free_port()
        fake = start([sys.executable, "-m", "tests.support.fake_upstream", "--port", str(fake_port)], "1")
        stack.callback(stop, fake)
        upstream = f"http://127.0.0.1:{fake_port}"
        wait_http(upstream + "/health", process=fake)
        process, url = start_gateway(upstream, "aiohttp", workdir)
        stack.callback(stop, process)
        wait_http(url + "/health", process=process)
        time.sleep(2)  # start-up work out of the idle reading
        gateway = Target("prefixgate", url, process.pid)
        gateway.idle = idle_cpu_rate(process.pid)
        for stream in (False, True):
            row: dict[str, Any] = {"mode": "stream" if stream else "json",
                                   **{name: {"cpu_ms": [], "rps": []} for name in ENDPOINTS}}
            for index in range(args.rounds):
                order = list(ENDPOINTS) if index % 2 == 0 else list(ENDPOINTS)[::-1]
                for name in order:
                    load, cpu = measure_closed(gateway, payload(name, stream, args.tokens), 64, args.seconds,
                                               script, ENDPOINTS[name])
                    if load.errors:
                        sys.exit(f"{name} {row['mode']}: {load.errors} errors of {load.requests} requests")
                    row[name]["cpu_ms"].append(cpu)
                    row[name]["rps"].append(load.rps)
                    print(f"round {index + 1} {row['mode']} {name}: {cpu:.3f} ms CPU/request, {load.rps:.0f} req/s",
                          flush=True)
            rows.append(row)
    meta = {"date": date.today().isoformat(), "where": f"{machine.machine()}", "rounds": args.rounds,
            "seconds": args.seconds, "tokens": args.tokens, "idle_ms_per_s": gateway.idle * 1000,
            "medians": {row["mode"]: {name: statistics.median(row[name]["cpu_ms"]) for name in ENDPOINTS}
                        for row in rows}}
    table = markdown(rows, meta)
    print(table)
    out = Path(args.out)
    write_result(out, "agent_overhead", meta, rows)
    write_block(out, "agent_overhead", table)


if __name__ == "__main__":
    main()
