"""The gateway CPU of a Responses request beside a chat request's, with overhead.py's measurement.

One prefixgate (one uvicorn worker on CPU 0, aiohttp client, defaults: so each Responses answer is
stored, in process) in front of the fake upstream (CPU 1), which answers both APIs with the same
number of tokens: chat as chunks ending ``[DONE]``, Responses as events ending ``response.completed``.
wrk (CPU 1) keeps 64 connections busy, JSON and streamed; each round sends the chat body and then the
Responses body through the same gateway (the order reversed every other round). Gateway CPU per
request = (CPU time of its threads less its idle rate) / requests, as in tests/bench/overhead.py; the
ratio Responses / chat is taken within each round. Writes docs/responses_overhead.json and the
``responses_overhead`` block of docs/benchmarks.md.

    python tests/bench/responses_overhead.py [--seconds 8] [--rounds 3] [--tokens 32]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
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

ENDPOINTS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


def payload(endpoint: str, stream: bool, tokens: int) -> dict[str, Any]:
    if endpoint == "chat":
        return body(stream, tokens, 0.0)
    return {"model": "fake-model", "input": "Hello there, how are you?", "max_output_tokens": tokens,
            "stream": stream}


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any], labels: dict[str, str]) -> str:
    """The table: per answer mode, chat's CPU beside the other's (``labels``: each endpoint's name in it)."""
    (base, base_label), (other, label) = labels.items()
    lines = [f"Run of {meta['date']} on {meta['where']}; {meta['rounds']} rounds of {meta['seconds']} s per cell, "
             f"wrk with 64 connections, {meta['tokens']} tokens an answer, the fake upstream answering at once; "
             f"gateway idle CPU {meta['idle_ms_per_s']:.2f} ms/s taken off. Median of the rounds (range).", "",
             f"| answer | {base_label} CPU/request (ms) | {label} CPU/request (ms) | "
             f"{label} / {base_label}, per round | {base_label} req/s | {label} req/s |", "|---|---|---|---|---|---|"]
    for row in rows:
        first, second = row[base], row[other]
        ratios = [b / a for a, b in zip(first["cpu_ms"], second["cpu_ms"], strict=True)]
        lines.append(f"| {row['mode']} | {_spread(first['cpu_ms'], '.3f')} | {_spread(second['cpu_ms'], '.3f')} | "
                     f"{_spread(ratios, '.2f', 'x')} | {_spread(first['rps'], '.0f')} | "
                     f"{_spread(second['rps'], '.0f')} |")
    return "\n".join(lines)


def side_by_side(endpoints: dict[str, str], labels: dict[str, str], payload: Callable[[str, bool, int], dict],
                 name: str) -> None:
    """Measure ``endpoints`` (name: path; chat's first) through one gateway, round by round, and write ``name``'s
    result file and block of docs/benchmarks.md."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install -y wrk")
    workdir = Path(tempfile.mkdtemp(prefix=f"pg-{name}-"))
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
                                   **{endpoint: {"cpu_ms": [], "rps": []} for endpoint in endpoints}}
            for index in range(args.rounds):
                order = list(endpoints) if index % 2 == 0 else list(endpoints)[::-1]
                for endpoint in order:
                    load, cpu = measure_closed(gateway, payload(endpoint, stream, args.tokens), 64, args.seconds,
                                               script, endpoints[endpoint])
                    if load.errors:
                        sys.exit(f"{endpoint} {row['mode']}: {load.errors} errors of {load.requests} requests")
                    row[endpoint]["cpu_ms"].append(cpu)
                    row[endpoint]["rps"].append(load.rps)
                    print(f"round {index + 1} {row['mode']} {endpoint}: {cpu:.3f} ms CPU/request, "
                          f"{load.rps:.0f} req/s", flush=True)
            rows.append(row)
    meta = {"date": date.today().isoformat(), "where": f"{machine.machine()}", "rounds": args.rounds,
            "seconds": args.seconds, "tokens": args.tokens, "idle_ms_per_s": gateway.idle * 1000,
            "medians": {row["mode"]: {endpoint: statistics.median(row[endpoint]["cpu_ms"]) for endpoint in endpoints}
                        for row in rows}}
    table = markdown(rows, meta, labels)
    print(table)
    out = Path(args.out)
    write_result(out, name, meta, rows)
    write_block(out, name, table)


def main() -> None:
    side_by_side(ENDPOINTS, {"chat": "chat", "responses": "Responses"}, payload, "responses_overhead")


if __name__ == "__main__":
    main()
