"""Overhead benchmark: the same load sent straight to a fast fake upstream and through prefixgate.

One run measures, at concurrency 1, 16 and 64, streaming and non-streaming:
  * latency p50/p99 direct and through prefixgate (added = through - direct), with an upstream
    that paces tokens like an engine: 20 ms per token (a loaded GPU engine's inter-token latency;
    vLLM benchmarks under load report 20-80 ms) and 2 ms per token (a stress level no real engine
    sustains at 64 streams: it sends 10x the chunks per second through the relay);
  * max requests/s direct and through prefixgate with an upstream that answers at once;
  * prefixgate's CPU time per request (utime+stime of its process / requests).
prefixgate runs as one uvicorn worker pinned to CPU 0; the fake upstream and the load generator
(wrk, C, Debian package `wrk`) share CPU 1, so the gateway never competes with them for a core.

    python tests/bench/overhead.py [--seconds 8] [--clients aiohttp,httpx] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from proxy.engine import free_port

ROOT = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")

WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("PG_BODY")
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests":%d,"duration_us":%d,"errors":%d,"non2xx":%d,'
    .. '"p50":%d,"p99":%d}\\n', summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout, e.status, latency:percentile(50), latency:percentile(99)))
end
"""


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class Load:
    requests: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def run_wrk(url: str, body: dict, concurrency: int, seconds: float, script: Path) -> Load:
    env = {**os.environ, "PG_BODY": json.dumps(body)}
    command = ["taskset", "-c", "1", "wrk", "-t1", f"-c{concurrency}", f"-d{int(seconds)}s", "--timeout", "10s",
               "-s", str(script), url + "/v1/chat/completions"]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    line = next(x for x in output.splitlines() if x.startswith("RESULT "))
    data = json.loads(line[len("RESULT "):])
    return Load(data["requests"], data["duration_us"] / 1e6, data["errors"] + data["non2xx"],
                data["p50"] / 1000, data["p99"] / 1000)


def start(command: list[str], cpu: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", cpu, *command], cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_gateway(upstream: str, client: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = workdir / f"bench-{client}.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"port": port, "http_client": client},
        "pools": [{"name": "bench", "replicas": [upstream + "/v1"], "models": ["fake-model"]}],
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    process = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "proxy.cli", "serve",
                                "--config", str(config)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health")
    return process, url


def body(stream: bool, tokens: int, delay_ms: float) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "Hello there, how are you?"}],
            "max_tokens": tokens, "stream": stream, "fake_delay_ms": delay_ms}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--clients", default="aiohttp,httpx")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--tokens", type=int, default=32, help="chunks per streamed answer")
    parser.add_argument("--delays-ms", default="20,2", help="per-token delays of the paced latency phases")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install -y wrk")
    clients = args.clients.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="pg-bench-"))
    script = workdir / "post.lua"
    script.write_text(WRK_SCRIPT)
    fake_port = free_port()
    fake = start([sys.executable, "-m", "tests.support.fake_upstream", "--port", str(fake_port)], "1")
    upstream = f"http://127.0.0.1:{fake_port}"
    wait_http(upstream + "/health")
    gateways = {client: start_gateway(upstream, client, workdir) for client in clients}
    rows = []
    try:
        phases = [(f"paced {d:g} ms", d) for d in map(float, args.delays_ms.split(","))] + [("max-rps", 0.0)]
        for phase, delay in phases:
            for stream in (False, True):
                for concurrency in levels:
                    payload = body(stream, args.tokens, delay)
                    run_wrk(upstream, payload, concurrency, 1, script)  # warm-up
                    direct = run_wrk(upstream, payload, concurrency, args.seconds, script)
                    row = {"phase": phase, "stream": stream, "concurrency": concurrency, "direct": direct}
                    for client, (process, url) in gateways.items():
                        run_wrk(url, payload, concurrency, 1, script)
                        before = cpu_seconds(process.pid)
                        through = run_wrk(url, payload, concurrency, args.seconds, script)
                        row[client] = through
                        row[client + "_cpu_ms"] = (cpu_seconds(process.pid) - before) * 1000 / max(through.requests, 1)
                    rows.append(row)
                    print(format_row(row, clients), flush=True)
    finally:
        for process, _ in gateways.values():
            process.terminate()
        fake.terminate()
    write_report(Path(args.out), rows, clients, args)


def format_row(row: dict, clients: list[str]) -> str:
    d: Load = row["direct"]
    parts = [f"{row['phase']:12} stream={row['stream']!s:5} c={row['concurrency']:3}",
             f"direct {d.rps:8.0f} rps p50 {d.p50_ms:6.2f} p99 {d.p99_ms:6.2f}"]
    for client in clients:
        t: Load = row[client]
        parts.append(f"{client} {t.rps:8.0f} rps ({t.rps / d.rps:4.2f}x) +p50 {t.p50_ms - d.p50_ms:6.2f} "
                     f"+p99 {t.p99_ms - d.p99_ms:6.2f} cpu {row[client + '_cpu_ms']:.3f} ms/req err {t.errors}")
    return " | ".join(parts)


def write_report(path: Path, rows: list[dict], clients: list[str], args: argparse.Namespace) -> None:
    lines = [
        "| phase | mode | conc. | direct rps | direct p50 / p99 ms | client | through rps | rps ratio "
        "| added p50 ms | added p99 ms | gateway CPU ms/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        d: Load = row["direct"]
        for client in clients:
            t: Load = row[client]
            lines.append(
                f"| {row['phase']} | {'stream' if row['stream'] else 'json'} | {row['concurrency']} "
                f"| {d.rps:.0f} | {d.p50_ms:.2f} / {d.p99_ms:.2f} | {client} | {t.rps:.0f} | {t.rps / d.rps:.2f} "
                f"| {t.p50_ms - d.p50_ms:.2f} | {t.p99_ms - d.p99_ms:.2f} | {row[client + '_cpu_ms']:.3f} "
                f"| {t.errors} |"
            )
    table = "\n".join(lines)
    command = "python tests/bench/overhead.py " + " ".join(sys.argv[1:])
    marker_start, marker_end = "<!-- overhead:start -->", "<!-- overhead:end -->"
    block = (f"{marker_start}\nCommand: `{command.strip()}` ({args.seconds:g} s per cell, {args.tokens} "
             f"chunks per answer; paced phases wait the named time before each chunk)\n\n{table}\n{marker_end}")
    text = path.read_text() if path.exists() else ""
    if marker_start in text:
        head, rest = text.split(marker_start, 1)
        text = head + block + rest.split(marker_end, 1)[1]
    else:
        text += ("\n" if text else "") + block + "\n"
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
