"""Slow-client floods against a running gateway, with a well-behaved client measured beside them.

An attacker process opens N connections and keeps them slow on purpose, re-opening each one the
gateway closes, for --hold seconds:
  slow-header  a request line, then one header line every 2 s, never finishing;
  slow-body    complete headers announcing a 100 kB body, then one body byte every 2 s.
Attack connections come from 127.0.0.2-127.0.0.251, so re-opened ones never run out of ports.
Meanwhile a well-behaved client sends a request every 20 ms over a kept-alive connection and
another every 20 ms on a new connection each time; reported for each: requests, errors, p50 and
p99 latency. Reported for the attack: connections opened, how long those the gateway closed had
lived, and how many were still open when the flood ended. prefixgate runs on CPU 0 with an upstream
that answers at once; the attacker, the client and the upstream share CPU 1.

The same floods go to prefixgate (`prefixgate serve`: deadlines and the connection cap) and, as a
control, the largest slow-header flood to the same app under uvicorn's own protocol (no deadlines,
no cap), as prefixgate ran before. The hot-path cost of the guard is measured side by side: wrk,
64 connections for --seconds, both servers alternating, --rounds times; requests/s and gateway CPU
per request, medians.

Writes the table into docs/reliability.md (block "abuse") and the numbers to docs/abuse.json.

    python tests/bench/abuse.py [--floods 1000,5000,limit] [--hold 45] [--rounds 5]

A flood size of `limit` is as many connections as the open-file limit lets the attacker hold (the limit
less ATTACKER_FILES): more than the gateway can have open, as on the machine this was first seen on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proxy.config.server import default_max_connections  # noqa: E402
from proxy.connections.guard import raise_file_limit  # noqa: E402
from proxy.engine.process import free_port  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.overhead import WRK_SCRIPT, cpu_seconds, run_wrk, wait_http  # noqa: E402
from tests.bench.processes import stop_gateway  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402

TRICKLE_EVERY_S = 2.0
ATTACKER_FILES = 16  # descriptors the attacker process needs besides its connections
SOURCES = [f"127.0.0.{n}" for n in range(2, 252)]
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "Hello there, how are you?"}],
        "max_tokens": 8}


# ---- the attacker (a process of its own: python abuse.py --attack ...) ---------------------------------

async def attack(port: int, kind: str, size: int, hold: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + hold
    lifetimes: list[float] = []
    counts = {"opened": 0, "connect_failures": 0, "open_at_end": 0}

    async def keep_one(index: int) -> None:
        source = SOURCES[index % len(SOURCES)]
        while loop.time() < stop_at:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
            except OSError:
                counts["connect_failures"] += 1
                await asyncio.sleep(1)
                continue
            counts["opened"] += 1
            born = loop.time()
            if kind == "slow-header":
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\n")
            else:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100000\r\n\r\n")
            closed = False
            try:
                while loop.time() < stop_at:
                    try:
                        data = await asyncio.wait_for(reader.read(65536), min(TRICKLE_EVERY_S, stop_at - loop.time()))
                    except TimeoutError:
                        writer.write(b"X-Slow: 1\r\n" if kind == "slow-header" else b"{")
                        continue
                    if not data:
                        closed = True
                        break
            except OSError:
                closed = True
            if closed:
                lifetimes.append(loop.time() - born)
            else:
                counts["open_at_end"] += 1
            writer.close()

    tasks = []
    for index in range(size):  # ramp up over about two seconds, as a client machine would
        tasks.append(asyncio.create_task(keep_one(index)))
        if index % 200 == 199:
            await asyncio.sleep(0.02)
    await asyncio.gather(*tasks, return_exceptions=True)
    lifetimes.sort()
    return {**counts, "closed_by_gateway": len(lifetimes),
            "lifetime_p50_s": _pick(lifetimes, 0.5), "lifetime_p99_s": _pick(lifetimes, 0.99),
            "lifetime_max_s": lifetimes[-1] if lifetimes else None}


def _pick(values: list[float], q: float) -> float | None:
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


# ---- the well-behaved client ---------------------------------------------------------------------------

class Client:
    """Sends a request every 20 ms on a thread: over one kept-alive connection, or a new one each time."""

    def __init__(self, origin: str, keep_alive: bool) -> None:
        self.origin = origin
        self.keep_alive = keep_alive
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        limits = httpx.Limits(max_keepalive_connections=1 if self.keep_alive else 0)
        with httpx.Client(base_url=self.origin, timeout=10, limits=limits) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    response = client.post("/v1/chat/completions", json=BODY)
                    if response.status_code == 200:
                        self.latencies.append((time.perf_counter() - started) * 1000)
                    else:
                        self.errors.append(str(response.status_code))
                except httpx.HTTPError as error:
                    self.errors.append(type(error).__name__)
                self._stop.wait(0.02)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(20)
        done = sorted(self.latencies)
        return {"requests": len(done) + len(self.errors), "errors": len(self.errors),
                "error_kinds": sorted(set(self.errors)), "p50_ms": _pick(done, 0.5), "p99_ms": _pick(done, 0.99)}


# ---- the servers ---------------------------------------------------------------------------------------

def serve_plain(config_path: str) -> None:
    """The gateway's app under uvicorn's own protocol, as before the connection guard."""
    import uvicorn

    from proxy.app import ENV_RESOLVED_CONFIG
    from proxy.commands.cli import settle_garbage_collector
    from proxy.config.load import dump_config, load_config

    os.environ[ENV_RESOLVED_CONFIG] = dump_config(load_config(config_path))
    server = yaml.safe_load(Path(config_path).read_text())["server"]
    settle_garbage_collector()  # as `serve` does: only the protocol differs
    uvicorn.run("proxy.app:app_from_environment", factory=True, host="127.0.0.1", port=server["port"],
                loop="uvloop", http="httptools", log_level="warning", access_log=False, proxy_headers=False)


def start_server(guarded: bool, upstream: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    path = workdir / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump({"server": {"port": port}, "data_dir": str(workdir),
                                    "pools": [{"name": "bench", "replicas": [upstream + "/v1"],
                                               "models": ["fake-model"]}]}))
    command = ([sys.executable, "-m", "proxy", "serve", "--config", str(path)] if guarded else
               [sys.executable, __file__, "--plain-server", str(path)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    with open(workdir / f"gateway-{port}.log", "wb") as log:
        process = subprocess.Popen(["taskset", "-c", "0", *command], cwd=ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    origin = f"http://127.0.0.1:{port}"
    wait_http(origin + "/health")
    return process, origin


def open_connections(pid: int) -> int:
    """The gateway's open descriptors: client connections, upstream ones and a few files."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def flood(origin: str, pid: int, kind: str, size: int, hold: float) -> dict[str, Any]:
    port = int(origin.rsplit(":", 1)[1])
    attacker = subprocess.Popen(["taskset", "-c", "1", sys.executable, __file__, "--attack", kind,
                                 "--size", str(size), "--hold", str(hold), "--port", str(port)],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)
    time.sleep(min(5.0, hold / 4))  # let the flood build before measuring beside it
    clients = {"kept-alive": Client(origin, True), "new connection each": Client(origin, False)}
    for client in clients.values():
        client.start()
    peak = 0
    while attacker.poll() is None:
        peak = max(peak, open_connections(pid))
        time.sleep(0.5)
    measured = {name: client.stop() for name, client in clients.items()}
    output = attacker.stdout.read() if attacker.stdout else ""
    return {"kind": kind, "size": size, "hold_s": hold, "attack": json.loads(output.strip().splitlines()[-1]),
            "gateway_fds_peak": peak, "clients": measured}


# ---- hot-path cost ---------------------------------------------------------------------------------------

def cost(servers: dict[str, tuple[subprocess.Popen[bytes], str]], seconds: int, rounds: int,
         workdir: Path) -> dict[str, Any]:
    script = workdir / "bench.lua"
    script.write_text(WRK_SCRIPT)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    for _ in range(rounds):
        for name, (process, origin) in servers.items():
            run_wrk(origin, BODY, 64, 1, script)  # warm-up
            before = cpu_seconds(process.pid)
            load = run_wrk(origin, BODY, 64, seconds, script)
            runs[name].append({"rps": load.rps, "cpu_us_per_request":
                               (cpu_seconds(process.pid) - before) * 1e6 / max(load.requests, 1),
                               "errors": load.errors, "p99_ms": load.p99_ms})
    medians = {name: {key: statistics.median(run[key] for run in rows) for key in rows[0]}
               for name, rows in runs.items()}
    return {"runs": runs, "medians": medians}


# ---- report ----------------------------------------------------------------------------------------------

def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def markdown(results: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [f"Command: `{meta['command']}`; run of {meta['date']} on {meta['where']}; gateway on CPU 0 "
             f"(open-file limit {meta['file_limit']}, "
             f"so at most {meta['max_connections']} client connections), attacker, client and upstream on CPU 1. "
             f"Each flood held {meta['hold_s']:.0f} s, one run of each; server.header_timeout_s "
             f"{meta['header_timeout_s']:g}, server.body_timeout_s {meta['body_timeout_s']:g}.", "",
             "| server | flood | attack connections opened | closed by the gateway after (s), p50 / p99 / max | "
             "open when it ended | client | requests | errors | p50 (ms) | p99 (ms) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in results["floods"]:
        attack = row["attack"]
        lived = f"{_s(attack['lifetime_p50_s'])} / {_s(attack['lifetime_p99_s'])} / {_s(attack['lifetime_max_s'])}"
        for name, client in row["clients"].items():
            errors = str(client["errors"]) + (f" ({', '.join(client['error_kinds'])})" if client["errors"] else "")
            lines.append(f"| {row['server']} | {row['size']:,} {row['kind']} | {attack['opened']:,} | {lived} | "
                         f"{attack['open_at_end']:,} | {name} | {client['requests']} | {errors} | "
                         f"{_ms(client['p50_ms'])} | {_ms(client['p99_ms'])} |")
    medians = results["cost"]["medians"]
    plain, guarded = medians["uvicorn protocol (before)"], medians["prefixgate"]
    lines += ["", f"Hot-path cost, wrk with 64 connections for {meta['seconds']} s, both servers alternating, "
              f"{meta['rounds']} rounds, medians:", "",
              "| server | requests/s | gateway CPU per request (us) | p99 (ms) | errors |", "|---|---|---|---|---|"]
    for name, row in medians.items():
        lines.append(f"| {name} | {row['rps']:.0f} | {row['cpu_us_per_request']:.0f} | {row['p99_ms']:.1f} | "
                     f"{row['errors']:.0f} |")
    lines += ["", f"prefixgate against the uvicorn protocol: requests/s {guarded['rps'] / plain['rps']:.3f}x, CPU per "
              f"request {guarded['cpu_us_per_request'] / plain['cpu_us_per_request']:.3f}x.", "",
              "Result file: `docs/abuse.json`."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--floods", default="1000,5000,limit",
                        help="attack connections per flood; limit = the open-file limit less a few")
    parser.add_argument("--kinds", default="slow-header,slow-body")
    parser.add_argument("--hold", type=float, default=45.0, help="seconds each flood lasts")
    parser.add_argument("--seconds", type=int, default=8, help="wrk seconds per cost round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "docs" / "reliability.md"))
    parser.add_argument("--attack", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--plain-server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_server:
        serve_plain(args.plain_server)
        return
    if args.attack:
        raise_file_limit()
        import uvloop

        print(json.dumps(uvloop.run(attack(args.port, args.attack, args.size, args.hold))), flush=True)
        return

    from proxy.config.load import build_config

    files = raise_file_limit()
    sizes = [files - ATTACKER_FILES if size == "limit" else int(size) for size in args.floods.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="abuse-"))
    upstream_port = free_port()
    upstream = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-m", "tests.support.fake_upstream",
                                 "--port", str(upstream_port)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    upstream_origin = f"http://127.0.0.1:{upstream_port}"
    wait_http(upstream_origin + "/health")
    servers = {"prefixgate": start_server(True, upstream_origin, workdir),
               "uvicorn protocol (before)": start_server(False, upstream_origin, workdir)}
    floods = []
    try:
        results_cost = cost(servers, args.seconds, args.rounds, workdir)
        print(json.dumps(results_cost["medians"]), flush=True)
        process, origin = servers["prefixgate"]
        for kind in args.kinds.split(","):
            for size in sizes:
                floods.append({"server": "prefixgate", **flood(origin, process.pid, kind, size, args.hold)})
                print(json.dumps(floods[-1]), flush=True)
        process, origin = servers["uvicorn protocol (before)"]
        floods.append({"server": "uvicorn protocol (before)",
                       **flood(origin, process.pid, "slow-header", max(sizes), args.hold)})
        print(json.dumps(floods[-1]), flush=True)
    finally:
        for process, _ in servers.values():
            stop_gateway(process)
        stop_gateway(upstream)
    server = build_config({}, env={}, source="defaults").server
    meta = {"command": command_line("abuse.py", sys.argv[1:]),
            "date": date.today().isoformat(), "where": machine.machine(), "file_limit": files,
            "max_connections": default_max_connections(files), "hold_s": args.hold,
            "header_timeout_s": server.header_timeout_s, "body_timeout_s": server.body_timeout_s,
            "seconds": args.seconds, "rounds": args.rounds}
    results = {"floods": floods, "cost": results_cost}
    table = markdown(results, meta)
    print(table)
    out = Path(args.out)
    write_result(out, "abuse", meta, results)
    write_block(out, "abuse", table)


if __name__ == "__main__":
    main()
