"""Overhead benchmark: the same load sent straight to a fast fake upstream and through prefixgate.

Latency (open loop): requests arrive on a seeded Poisson schedule (tests/bench/open_loop.py) at a
mean concurrency of 1, 16 and 64 (rate = concurrency / answer time), streaming and non-streaming,
with an upstream that paces tokens like an engine: 20 ms per token (a loaded GPU engine's
inter-token latency) and 2 ms (ten times the chunk rate, a stress level). The same schedule goes
direct, through a byte-copying TCP forwarder (the cost of any extra hop on this machine, a
control) and through prefixgate; added = through - direct, at p50 and p99.

Closed loop (wrk, C): c=64 connections that each send again the moment an answer ends. With
answers of identical length the 64 stay in lockstep for the whole run, so this is the burst worst
case (64 arrivals within a millisecond); it also gives the throughput ratio at 64 streams, and,
with an upstream that answers at once, the max requests/s.

prefixgate runs as one uvicorn worker pinned to CPU 0; the fake upstream and the load generators
share CPU 1. Gateway CPU per request = (CPU time of its threads, from the scheduler's nanosecond
counters, less what the process spends idle over the same time) / requests sent to it. The idle
rate (timers, health checks) is measured once before the load and printed with the table; left in,
it would dominate the cells at 1.6 requests/s.

Against a baseline (a restructure's promise: CPU per request and added latency no worse than before):
--baseline REV checks REV out into a temporary detached git worktree (removed again however the run
ends) and starts a second gateway from it with the same venv, config, CPU and measurement; only the
source tree differs (its working directory and PYTHONPATH; `python -m proxy serve`, or
`python -m proxy.cli serve` for trees without proxy/__main__.py). Before any load, each tree is
checked once for which files `proxy`, `policies` and the serve module import from; the run stops
if either would load another tree's. The baseline is one more target in every cell, open and
closed loop, interleaved within each round, the gateways' order reversed every other round; the
closed-loop cells run --rounds rounds too (3 by default here; once without --baseline). It prints a
table per cell: gateway CPU per request and added p50 / p99, current and baseline, and the ratio
current/baseline taken within each round, each the median over rounds with its range (a ratio of
added latencies swings wildly when the baseline's is near 0: read it beside the two figures). It
writes the JSON (closed-loop requests/s too) to --baseline-result and leaves docs/ alone. At the
defaults, 3 rounds take about 35 minutes.

    python tests/bench/overhead.py [--seconds 8] [--clients aiohttp] [--out docs/benchmarks.md]
    python tests/bench/overhead.py --baseline 9207dfb --rounds 3 [--clients aiohttp] [--open-only] [--idle-each-round] \
        [--baseline-result bench-out/overhead_baseline.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from datetime import date
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proxy.engine.process import free_port  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import command_line, replace_block, write_result  # noqa: E402

IDLE_SECONDS = 5.0
BASELINE = "baseline-"  # a baseline gateway's target name: this prefix and its HTTP client

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


def wait_http(url: str, timeout: float = 30, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{url}: {' '.join(map(str, process.args))} exited ({process.returncode}) "
                               "before answering")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    """CPU time of all the process's threads, to the nanosecond (/proc/PID/stat counts 10 ms ticks,
    too coarse for a few requests)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            pass
    return total / 1e9


def idle_cpu_rate(pid: int, seconds: float = IDLE_SECONDS) -> float:
    """CPU seconds per second the process spends with no requests."""
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


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


def run_wrk(url: str, body: dict, concurrency: int, seconds: float, script: Path,
            path: str = "/v1/chat/completions") -> Load:
    env = {**os.environ, "PG_BODY": json.dumps(body)}
    command = ["taskset", "-c", "1", "wrk", "-t1", f"-c{concurrency}", f"-d{int(seconds)}s", "--timeout", "10s",
               "-s", str(script), url + path]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    line = next(x for x in output.splitlines() if x.startswith("RESULT "))
    data = json.loads(line[len("RESULT "):])
    return Load(data["requests"], data["duration_us"] / 1e6, data["errors"] + data["non2xx"],
                data["p50"] / 1000, data["p99"] / 1000)


def start(command: list[str], cpu: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", cpu, *command], cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve_command(tree: Path) -> list[str]:
    """How a gateway starts from ``tree``: `python -m proxy serve`, or `python -m proxy.cli serve` in
    trees from before proxy/__main__.py."""
    module = "proxy" if (tree / "proxy" / "__main__.py").exists() else "proxy.cli"
    return [sys.executable, "-m", module, "serve"]


def gateway_env(tree: Path) -> dict[str, str]:
    """The environment without PREFIXGATE_ settings, ``tree`` first on PYTHONPATH (its working directory)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    return env


def start_gateway(upstream: str, client: str, workdir: Path, tree: Path = ROOT,
                  name: str | None = None) -> tuple[subprocess.Popen, str]:
    """A gateway from ``tree`` on CPU 0, not yet waited for (wait_http its /health)."""
    port = free_port()
    config = workdir / f"bench-{name or client}.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"port": port, "http_client": client},
        "pools": [{"name": "bench", "replicas": [upstream + "/v1"], "models": ["fake-model"]}],
    }))
    process = subprocess.Popen(["taskset", "-c", "0", *serve_command(tree), "--config", str(config)],
                               cwd=tree, env=gateway_env(tree),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{port}"


IMPORT_CHECK = ("import importlib.util, sys, policies, proxy; print(proxy.__file__); print(policies.__file__); "
                "print(getattr(importlib.util.find_spec(sys.argv[1]), 'origin', None))")


def import_origins(tree: Path) -> dict[str, str]:
    """The files `proxy`, `policies` and the serve module load from for a gateway started from ``tree``
    (same interpreter, working directory and environment); exits when one is not ``tree``'s own."""
    module = serve_command(tree)[2]
    spec = "proxy.__main__" if module == "proxy" else module
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK, spec], cwd=tree, env=gateway_env(tree),
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"importing prefixgate from {tree} failed:\n{done.stderr.strip()}")
    origins = dict(zip(("proxy", "policies", "serve"), done.stdout.splitlines(), strict=True))
    for name, origin in origins.items():
        if not Path(origin).resolve().is_relative_to(tree.resolve()):
            sys.exit(f"a gateway started from {tree} would import {name} from {origin}, not from its own tree")
    return origins


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def describe(rev: str) -> dict[str, str]:
    """REV's full commit hash and subject."""
    commit, subject = git("log", "-1", "--format=%H%n%s", f"{rev}^{{commit}}").split("\n", 1)
    return {"rev": rev, "commit": commit, "subject": subject}


def current_tree() -> dict:
    """This tree: its HEAD, whether proxy/ or policies/ differ from it, and where it imports from."""
    dirty = bool(git("status", "--porcelain", "--", "proxy", "policies"))
    return {**describe("HEAD"), "uncommitted_changes": dirty, "tree": str(ROOT), "imports": import_origins(ROOT)}


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def short(info: dict) -> str:
    """A commit in a line: its short hash and subject, cut at 72 characters (the result file has it whole)."""
    subject = info["subject"] if len(info["subject"]) <= 72 else info["subject"][:71] + "…"
    return f"{info['commit'][:12]} {subject!r}"


def describe_tree(info: dict) -> str:
    command = " ".join(["python", *serve_command(Path(info["tree"]))[1:]])
    return f"{short(info)}: `{command}` in {info['tree']}, proxy from {info['imports']['proxy']}"


@contextmanager
def baseline_tree(rev: str, workdir: Path) -> Iterator[tuple[Path, dict]]:
    """REV checked out into a detached git worktree under ``workdir``, removed again however the run
    ends (SIGTERM becomes SystemExit meanwhile, so it too unwinds to here)."""
    commit = describe(rev)
    tree = workdir / f"baseline-{commit['commit'][:12]}"
    previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        git("worktree", "add", "--detach", str(tree), commit["commit"])
        yield tree, {**commit, "tree": str(tree), "imports": import_origins(tree)}
    finally:
        try:
            git("worktree", "remove", "--force", str(tree))
        except RuntimeError as error:
            print(f"{error}; deleting {tree} and pruning", file=sys.stderr)
            shutil.rmtree(tree, ignore_errors=True)
            git("worktree", "prune")
        signal.signal(signal.SIGTERM, previous)


@dataclass
class OpenLoad:
    sent: int
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    first_p50_ms: float


def run_open_loop(url: str, body: dict, rate: float, seconds: float, warmup: float) -> OpenLoad:
    command = ["taskset", "-c", "1", sys.executable, str(ROOT / "tests" / "bench" / "open_loop.py"),
               url + "/v1/chat/completions", json.dumps(body), "--rate", f"{rate:.3f}",
               "--seconds", str(seconds), "--warmup", str(warmup)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    data = json.loads(output.split("RESULT ", 1)[1])
    return OpenLoad(data["sent"], data["requests"], data["errors"], data["p50"], data["p99"], data["first_p50"])


def body(stream: bool, tokens: int, delay_ms: float) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "Hello there, how are you?"}],
            "max_tokens": tokens, "stream": stream, "fake_delay_ms": delay_ms}


@dataclass
class Target:
    name: str
    url: str
    pid: int | None  # a process whose CPU is counted
    idle: float = 0.0  # its CPU seconds per second without load, taken off its per-request CPU


def measure_open(target: Target, payload: dict, rate: float, seconds: float) -> tuple[OpenLoad, float | None]:
    before, started = (cpu_seconds(target.pid) if target.pid else 0.0), time.monotonic()
    load = run_open_loop(target.url, payload, rate, seconds, warmup=2.0)
    return load, _cpu_per_request(target, before, started, load.sent)


def _cpu_per_request(target: Target, before: float, started: float, requests: int) -> float | None:
    if not target.pid:
        return None
    busy = cpu_seconds(target.pid) - before - target.idle * (time.monotonic() - started)
    return max(busy, 0.0) * 1000 / max(requests, 1)


def measure_closed(
    target: Target, payload: dict, concurrency: int, seconds: float, script: Path, path: str = "/v1/chat/completions"
) -> tuple[Load, float | None]:
    run_wrk(target.url, payload, concurrency, 1, script, path)  # warm-up
    before, started = (cpu_seconds(target.pid) if target.pid else 0.0), time.monotonic()
    load = run_wrk(target.url, payload, concurrency, seconds, script, path)
    return load, _cpu_per_request(target, before, started, load.requests)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=None,
                        help="repeat each open-loop cell, targets interleaved; report the median of each round's gap "
                             "(default 1; 3 with --baseline, which repeats the closed-loop cells too)")
    parser.add_argument("--clients", default="aiohttp", help="HTTP clients to compare, e.g. aiohttp,httpx")
    parser.add_argument("--concurrency", default="1,16,64", help="mean concurrency of the open-loop phases")
    parser.add_argument("--tokens", type=int, default=32, help="chunks per streamed answer")
    parser.add_argument("--delays-ms", default="20,2", help="per-token delays of the paced latency phases")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"), help="not written with --baseline")
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure a gateway from this git revision (e.g. 9207dfb) and compare")
    parser.add_argument("--idle-each-round", action="store_true",
                        help="read each gateway's idle CPU again before each open-loop round (at light load the idle "
                             "rate taken off is a large part of a request's CPU, and it drifts)")
    parser.add_argument("--open-only", action="store_true",
                        help="only the open-loop cells (a light-load comparison needs many rounds of those alone)")
    parser.add_argument("--baseline-result", default=str(ROOT / "bench-out" / "overhead_baseline.json"),
                        help="where --baseline writes the comparison's JSON")
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = 3 if args.baseline else 1
    return args


def main() -> None:
    args = parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install -y wrk")
    clients = args.clients.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    delays = [float(d) for d in args.delays_ms.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="pg-bench-"))
    script = workdir / "post.lua"
    script.write_text(WRK_SCRIPT)
    with ExitStack() as stack:  # processes stopped, then the baseline's worktree removed, however the run ends
        trees, current, baseline = {"": ROOT}, {}, {}
        if args.baseline:
            current = current_tree()
            tree, baseline = stack.enter_context(baseline_tree(args.baseline, workdir))
            trees[BASELINE] = tree
            for name, info in (("current", current), ("baseline", baseline)):
                print(f"{name}: {describe_tree(info)}", flush=True)
        fake_port, forwarder_port = free_port(), free_port()
        fake = start([sys.executable, "-m", "tests.support.fake_upstream", "--port", str(fake_port)], "1")
        stack.callback(stop, fake)
        upstream = f"http://127.0.0.1:{fake_port}"
        wait_http(upstream + "/health", process=fake)
        forwarder = start([sys.executable, str(ROOT / "tests" / "bench" / "tcp_forwarder.py"),
                           str(forwarder_port), str(fake_port)], "0")
        stack.callback(stop, forwarder)
        gateways = {prefix + client: start_gateway(upstream, client, workdir, tree, prefix + client)
                    for prefix, tree in trees.items() for client in clients}
        for process, _ in gateways.values():
            stack.callback(stop, process)
        for process, url in gateways.values():
            wait_http(url + "/health", process=process)
        direct = Target("direct", upstream, None)
        hop = Target("forwarder", f"http://127.0.0.1:{forwarder_port}", forwarder.pid)
        through = [Target(name, url, process.pid) for name, (process, url) in gateways.items()]
        wait_http(hop.url + "/health", process=forwarder)
        time.sleep(2)  # start-up work out of the idle reading
        for target in (hop, *through):
            target.idle = idle_cpu_rate(target.pid)  # type: ignore[arg-type]
            print(f"{target.name} idle CPU {target.idle * 1000:.2f} ms/s", flush=True)

        def order(round_index: int) -> list[Target]:
            """The gateways in one round's order: reversed every other round against a baseline, so
            neither tree always goes first."""
            return through[::-1] if args.baseline and round_index % 2 else through

        open_rows = measure_open_cells(args, levels, delays, [direct, hop], order)
        closed_rows = [] if args.open_only else measure_closed_cells(args, delays, script, direct, order)
    idle = {t.name: t.idle for t in (hop, *through)}
    if args.baseline:
        write_comparison(Path(args.baseline_result), open_rows, closed_rows, args, idle, current, baseline)
    else:
        write_report(Path(args.out), open_rows, closed_rows, args, idle)


def measure_open_cells(args: argparse.Namespace, levels: list[int], delays: list[float], first: list[Target],
                       order: Callable[[int], list[Target]]) -> list[dict]:
    """Every open-loop cell, ``args.rounds`` rounds of ``first`` and then the gateways in ``order(round)``."""
    rows = []
    for delay in delays:
        for stream in (False, True):
            for concurrency in levels:
                payload = body(stream, args.tokens, delay)
                rate = concurrency / (args.tokens * delay / 1000)
                row = {"phase": f"paced {delay:g} ms", "stream": stream, "concurrency": concurrency,
                       "rate": rate, "answer_ms": args.tokens * delay, "rounds": []}
                for index in range(args.rounds):
                    if args.idle_each_round:
                        reread_idle(order(index))
                    row["rounds"].append({target.name: measure_open(target, payload, rate, args.seconds)
                                          for target in (*first, *order(index))})
                rows.append(row)
                print(format_open(row), flush=True)
    return rows


def reread_idle(targets: list[Target]) -> None:
    """Each gateway's idle CPU read again now (after a second's pause for the last load's tail), and printed."""
    time.sleep(1.0)
    for target in targets:
        if target.pid:
            target.idle = idle_cpu_rate(target.pid, 3.0)
    print("idle CPU " + ", ".join(f"{t.name} {t.idle * 1000:.2f} ms/s" for t in targets), flush=True)


def measure_closed_cells(args: argparse.Namespace, delays: list[float], script: Path, direct: Target,
                         order: Callable[[int], list[Target]]) -> list[dict]:
    """Every wrk cell: once (its row's "results"), or with --baseline ``args.rounds`` rounds (its "rounds")."""
    rows = []
    cells = [(f"paced {d:g} ms", d, 64) for d in delays] + [("max-rps", 0.0, 64)]
    for phase, delay, concurrency in cells:
        for stream in (False, True):
            payload = body(stream, args.tokens, delay)
            row: dict[str, Any] = {"phase": phase, "stream": stream, "concurrency": concurrency}
            rounds = [{target.name: measure_closed(target, payload, concurrency, args.seconds, script)
                       for target in (direct, *order(index))}
                      for index in range(args.rounds if args.baseline else 1)]
            for results in rounds:
                print(format_closed({**row, "results": results}), flush=True)
            row.update({"rounds": rounds} if args.baseline else {"results": rounds[0]})
            rows.append(row)
    return rows


def _mode(row: dict) -> str:
    return "stream" if row["stream"] else "json"


def summarize_open(row: dict) -> dict[str, dict[str, float]]:
    """Per target: medians over rounds of its own p50/p99, of its gap to direct in the same round, and of CPU."""
    summary = {}
    for name in row["rounds"][0]:
        gaps = [(r[name][0].p50_ms - r["direct"][0].p50_ms, r[name][0].p99_ms - r["direct"][0].p99_ms,
                 r[name][0].first_p50_ms - r["direct"][0].first_p50_ms) for r in row["rounds"]]
        summary[name] = {
            "p50": median(r[name][0].p50_ms for r in row["rounds"]),
            "p99": median(r[name][0].p99_ms for r in row["rounds"]),
            "added_p50": median(g[0] for g in gaps), "added_p99": median(g[1] for g in gaps),
            "added_first_p50": median(g[2] for g in gaps),
            "cpu": median(r[name][1] or 0.0 for r in row["rounds"]),
            "errors": sum(r[name][0].errors for r in row["rounds"]),
        }
    return summary


def format_open(row: dict) -> str:
    summary = summarize_open(row)
    d = summary["direct"]
    parts = [f"{row['phase']:12} {_mode(row):6} c={row['concurrency']:3} rate {row['rate']:6.1f}/s",
             f"direct p50 {d['p50']:7.2f} p99 {d['p99']:7.2f}"]
    for name, t in summary.items():
        if name != "direct":
            parts.append(f"{name} +p50 {t['added_p50']:6.2f} +p99 {t['added_p99']:6.2f} "
                         f"cpu {t['cpu']:.3f} ms/req err {t['errors']}")
    return " | ".join(parts)


def format_closed(row: dict) -> str:
    d: Load = row["results"]["direct"][0]
    parts = [f"{row['phase']:12} {_mode(row):6} c={row['concurrency']:3}",
             f"direct {d.rps:8.0f} rps p50 {d.p50_ms:7.2f} p99 {d.p99_ms:7.2f}"]
    for name, (t, cpu) in row["results"].items():
        if name != "direct":
            parts.append(f"{name} {t.rps:8.0f} rps ({t.rps / d.rps:4.2f}x) +p50 {t.p50_ms - d.p50_ms:6.2f} "
                         f"+p99 {t.p99_ms - d.p99_ms:6.2f} cpu {cpu:.3f} ms/req err {t.errors}")
    return " | ".join(parts)


def write_report(path: Path, open_rows: list[dict], closed_rows: list[dict], args: argparse.Namespace,
                 idle: dict[str, float]) -> None:
    command = command_line("overhead.py", sys.argv[1:])
    idle_text = ", ".join(f"{name} {rate * 1000:.1f} ms/s" for name, rate in idle.items())
    clients = ", ".join(machine.version(name) or name for name in args.clients.split(","))
    lines = [
        f"Run of {date.today().isoformat()} on {machine.machine()}; gateway upstream client {clients}.",
        "",
        f"Command: `{command}` ({args.seconds} s measured per cell after 2 s of warm-up, {args.tokens} chunks "
        f"per answer; Poisson arrivals, the same seeded schedule for every target; {args.rounds} round(s), "
        "targets interleaved, each figure the median over rounds of that round's gap to direct). Gateway CPU "
        f"per request leaves out the CPU each process spends idle, measured before the load: {idle_text}.",
        "",
        "| phase | mode | mean conc. | arrivals/s | direct p50 / p99 ms | forwarder added p50 / p99 ms "
        "| forwarder CPU ms/req | client | added p50 / p99 ms | stream first byte added p50 ms "
        "| gateway CPU ms/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in open_rows:
        summary = summarize_open(row)
        d, f = summary["direct"], summary["forwarder"]
        for name, t in summary.items():
            if name in ("direct", "forwarder"):
                continue
            first = f"{t['added_first_p50']:.2f}" if row["stream"] else "-"
            # Direct answers far slower than the fake's pacing: the shared load-generator core is the limit.
            saturated = " (load generator saturated)" if d["p50"] > 1.5 * row["answer_ms"] + 5 else ""
            lines.append(
                f"| {row['phase']}{saturated} | {_mode(row)} | {row['concurrency']} | {row['rate']:.1f} "
                f"| {d['p50']:.2f} / {d['p99']:.2f} | {f['added_p50']:.2f} / {f['added_p99']:.2f} | {f['cpu']:.3f} "
                f"| {name} | {t['added_p50']:.2f} / {t['added_p99']:.2f} | {first} | {t['cpu']:.3f} "
                f"| {t['errors'] + d['errors']} |"
            )
    text = path.read_text() if path.exists() else ""
    text = replace_block(text, "overhead", "\n".join(lines))
    lines = [
        f"Command: same run (wrk, {args.seconds} s per cell after 1 s of warm-up); one wrk run per cell: each "
        "figure a single run's, not a median",
        "",
        "| phase | mode | conc. | direct rps | direct p50 / p99 ms | client | through rps | rps ratio "
        "| added p50 / p99 ms | gateway CPU ms/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in closed_rows:
        d, _ = row["results"]["direct"]
        for name, (t, cpu) in row["results"].items():
            if name == "direct":
                continue
            lines.append(
                f"| {row['phase']} | {_mode(row)} | {row['concurrency']} | {d.rps:.0f} "
                f"| {d.p50_ms:.2f} / {d.p99_ms:.2f} | {name} | {t.rps:.0f} | {t.rps / d.rps:.2f} "
                f"| {t.p50_ms - d.p50_ms:.2f} / {t.p99_ms - d.p99_ms:.2f} | {cpu:.3f} | {t.errors + d.errors} |"
            )
    lines += ["", "Result file (both tables): `docs/overhead.json`."]
    text = replace_block(text, "overhead-closed", "\n".join(lines))
    path.write_text(text)
    write_result(path, "overhead", {"date": date.today().isoformat(), "machine": machine.machine(),
                                    "clients": clients, "command": command, "seconds": args.seconds,
                                    "rounds": args.rounds, "tokens": args.tokens, "idle_cpu_s_per_s": idle},
                 {"open_loop": _plain(open_rows), "closed_loop": _plain(closed_rows)})
    print(f"wrote {path} and its result file")


COMPARED = {"cpu_ms_per_req": ("gateway CPU ms/req", 3), "added_p50_ms": ("added p50 ms", 2),
            "added_p99_ms": ("added p99 ms", 2)}


def round_figures(results: dict, name: str) -> dict[str, float | None]:
    """One target's figures in one round: CPU per request, latency added to direct's in the same round,
    and (closed loop) requests/s."""
    load, cpu = results[name]
    direct = results["direct"][0]
    figures = {"cpu_ms_per_req": cpu, "added_p50_ms": load.p50_ms - direct.p50_ms,
               "added_p99_ms": load.p99_ms - direct.p99_ms}
    return figures | ({"rps": load.rps} if isinstance(load, Load) else {})


def spread(values: list[float | None]) -> dict[str, float] | None:
    """The median over rounds and the range (rounds without a figure left out)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": median(present), "min": min(present), "max": max(present), "rounds": len(present)}


def ratio(current: float | None, baseline: float | None) -> float | None:
    """current / baseline; None where the baseline's figure is not above 0 (an added latency can be)."""
    return current / baseline if current is not None and baseline is not None and baseline > 0 else None


def compare_cell(rounds: list[dict], client: str) -> dict[str, Any]:
    """One cell, one client: each figure of the current tree and the baseline, and current/baseline
    taken within each round, as medians over the rounds with their ranges; errors summed."""
    pairs = [(round_figures(r, client), round_figures(r, BASELINE + client)) for r in rounds]
    figures = {key: {"current": spread([c[key] for c, _ in pairs]), "baseline": spread([b[key] for _, b in pairs]),
                     "ratio": spread([ratio(c[key], b[key]) for c, b in pairs])} for key in pairs[0][0]}
    errors = {side: sum(r[name][0].errors for r in rounds)
              for side, name in (("direct", "direct"), ("current", client), ("baseline", BASELINE + client))}
    return figures | {"errors": errors}


def comparison(open_rows: list[dict], closed_rows: list[dict], clients: list[str]) -> list[dict]:
    cells = []
    for loop, rows in (("open", open_rows), ("closed", closed_rows)):
        for row in rows:
            for client in clients:
                cells.append({"loop": loop, "phase": row["phase"], "stream": row["stream"],
                              "concurrency": row["concurrency"], "client": client,
                              **compare_cell(row["rounds"], client)})
    return cells


def format_spread(figure: dict[str, float] | None, digits: int, rounds: int) -> str:
    """``median [min, max]``, saying how many of the ``rounds`` had the figure when not all did."""
    if figure is None:
        return "n/a"
    text = f"{figure['median']:.{digits}f}"
    if figure["rounds"] > 1:
        text += f" [{figure['min']:.{digits}f}, {figure['max']:.{digits}f}]"
    return text if figure["rounds"] == rounds else f"{text} ({figure['rounds']} of {rounds} rounds)"


def comparison_table(cells: list[dict], args: argparse.Namespace, idle: dict[str, float], current: dict,
                     baseline: dict) -> str:
    dirty = " plus uncommitted changes in proxy/ or policies/" if current["uncommitted_changes"] else ""
    idle_text = ", ".join(f"{name} {rate * 1000:.1f} ms/s" for name, rate in idle.items())
    lines = [
        f"Current: {short(current)}{dirty}; baseline: {short(baseline)}.",
        "",
        f"{args.seconds} s per cell, {args.rounds} round(s), targets interleaved, the gateways' order reversed every "
        "other round; each figure is the median over rounds [min, max]; ratio = current / baseline within a "
        "round (n/a where the baseline's figure is 0 or less); added = through - direct in the same round. "
        f"Idle CPU left out: {idle_text}.",
    ]
    if args.rounds < 3:
        lines += ["", f"**Not a headline: {args.rounds} round(s); a headline needs at least 3.**"]
    header = ["loop", "phase", "mode", "conc.", "client"]
    for label, _ in COMPARED.values():
        header += [f"{label} current", "baseline", "ratio"]
    header.append("errors direct / current / baseline")
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cell in cells:
        parts = [cell["loop"], cell["phase"], _mode(cell), str(cell["concurrency"]), cell["client"]]
        for key, (_, digits) in COMPARED.items():
            figure = cell[key]
            parts += [format_spread(figure[side], places, args.rounds)
                      for side, places in (("current", digits), ("baseline", digits), ("ratio", 2))]
        errors = cell["errors"]
        parts.append(f"{errors['direct']} / {errors['current']} / {errors['baseline']}")
        lines.append("| " + " | ".join(parts) + " |")
    return "\n".join(lines)


def write_comparison(path: Path, open_rows: list[dict], closed_rows: list[dict], args: argparse.Namespace,
                     idle: dict[str, float], current: dict, baseline: dict) -> None:
    """The current tree against the baseline: a markdown table printed, the JSON to ``path``; docs/ untouched."""
    clients = args.clients.split(",")
    cells = comparison(open_rows, closed_rows, clients)
    command = command_line("overhead.py", sys.argv[1:])
    meta = {"date": date.today().isoformat(), "machine": machine.machine(),
            "clients": ", ".join(machine.version(name) or name for name in clients), "command": command,
            "seconds": args.seconds, "rounds": args.rounds, "tokens": args.tokens, "idle_cpu_s_per_s": idle,
            "current": current, "baseline": baseline}
    results = {"comparison": cells, "open_loop": _plain(open_rows), "closed_loop": _plain(closed_rows)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    print()
    print(comparison_table(cells, args, idle, current, baseline))
    print(f"\nwrote {path}")


def _plain(value: Any) -> Any:
    """The rows as JSON can hold them: measurements (dataclasses) as their fields."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


if __name__ == "__main__":
    main()
