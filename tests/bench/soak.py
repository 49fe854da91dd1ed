"""Soak: a real `prefixgate serve` under a fixed request rate of mixed traffic for minutes, its
memory and open file descriptors sampled as it goes.

The mix walks every path where something could pile up: JSON and SSE answers (with and without
usage), retrieval with MiniLM and embedded Qdrant (embedding micro-batches, vector and passage
caches), stored answers, a rate-limited tenant (429s), clients that leave mid-stream (upstream
aborts), broken JSON (400) and unknown keys (401). The upstream is the fake OpenAI server in its
own process: this measures the gateway, not an engine.

    python tests/bench/soak.py --minutes 10            # writes docs/soak.json, docs/soak.png and
                                                       # the soak block of docs/reliability.md
tests/proxy/test_soak.py runs a one-minute version in CI. `--stack full` soaks the gateway as users run it
instead (two workers, Redis, retrieval, two vLLM engines, ingests and kills while serving): soak_full.py.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proxy.engine.process import free_port  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.processes import start_gateway, stop_gateway  # noqa: E402
from tests.bench.report import command_line, publish  # noqa: E402

KEYS = {"app": "sk-soak-app-1", "rag": "sk-soak-rag-1", "cached": "sk-soak-cached-1", "limited": "sk-soak-limited-1"}
DOCUMENTS = {
    "returns.md": "# Returns\n\nItems may be returned within 30 days of delivery for a full refund, unused and "
                  "in their original packaging.",
    "shipping.md": "# Shipping\n\nEvery order ships by ground courier. Standard delivery takes 3 to 5 business "
                   "days; express delivery arrives the next business day.",
    "warranty.md": "# Warranty\n\nEvery blender carries a two-year warranty that covers motor failure.",
    "support.md": "# Support\n\nSupport answers by phone on weekdays from 8 am to 6 pm.",
}
# One cycle of 20 requests: what each kind is, and the statuses it may get.
CYCLE = ["chat", "stream", "rag", "chat", "stream_usage", "cached", "limited", "stream", "rag", "gone",
         "chat", "stream", "rag", "cached", "bad_json", "stream_usage", "limited", "chat", "bad_key", "stream"]
EXPECTED = {"chat": {200}, "stream": {200}, "stream_usage": {200}, "rag": {200}, "cached": {200},
            "limited": {200, 429}, "bad_json": {400}, "bad_key": {401}, "gone": {200}}
WARMUP_SHARE = 0.25  # of the run: caches fill, the allocator settles


@dataclass
class Sample:
    at: float  # seconds into the run
    rss_mb: float
    fds: int
    threads: int
    sent: int


@dataclass
class Report:
    seconds: float
    rate: float
    sent: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    lost: int = 0  # no answer, or a status its kind should never get
    lost_examples: list[str] = field(default_factory=list)
    upstream_aborts: int = 0  # requests the upstream saw dropped (the gateway's aborts for clients that left)
    in_flight_after: float = 0.0  # the gateway's requests in flight once every client had its answer
    samples: list[Sample] = field(default_factory=list)

    def _window(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at <= end]

    def growth(self) -> dict[str, float]:
        """RSS and descriptors at the end against just after warm-up (medians of a tenth of the run each)."""
        warm = self.seconds * WARMUP_SHARE
        tenth = max(self.seconds / 10, 3.0)
        early = self._window(warm, warm + tenth) or self.samples[-1:]
        late = self._window(self.seconds - tenth, self.seconds + 5) or self.samples[-1:]
        early_rss = statistics.median(s.rss_mb for s in early)
        late_rss = statistics.median(s.rss_mb for s in late)
        return {"rss_after_warmup_mb": round(early_rss, 1), "rss_at_end_mb": round(late_rss, 1),
                "rss_growth_pct": round(100 * (late_rss - early_rss) / early_rss, 2),
                "fds_after_warmup": statistics.median(s.fds for s in early),
                "fds_at_end": statistics.median(s.fds for s in late),
                "peak_rss_mb": round(max(s.rss_mb for s in self.samples), 1)}


def gateway_config(upstream: str) -> dict[str, Any]:
    return {
        "pools": [{"name": "fake", "replicas": [upstream + "/v1"]}],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()]},
        "tenants": {"rag": {"retrieval": {"collection": "docs"}},
                    "cached": {"answer_cache": {"ttl_s": 30}},
                    "limited": {"limits": {"requests_per_minute": 60}}},
    }


def request_for(kind: str, index: int) -> tuple[str, dict[str, Any] | bytes]:
    """(key, body) of the index-th request of a kind; questions repeat, so caches fill and then hit."""
    question = f"Question {index % 300}: how long does delivery take, and can I return an item?"
    body: dict[str, Any] = {"model": "fake-model", "messages": [{"role": "user", "content": question}],
                            "fake_tokens": 16, "fake_delay_ms": 2}
    if kind in ("stream", "stream_usage", "gone"):
        body["stream"] = True
    if kind == "stream_usage":
        body["stream_options"] = {"include_usage": True}
    if kind == "gone":
        body.update(fake_tokens=200, fake_delay_ms=10)
    if kind == "cached":
        body.update(temperature=0, messages=[{"role": "user", "content": f"FAQ {index % 40}"}])
    key = {"rag": KEYS["rag"], "cached": KEYS["cached"], "limited": KEYS["limited"],
           "bad_key": "sk-soak-nobody-1"}.get(kind, KEYS["app"])
    return key, (b'{"model": "fake-model", "messages": [' if kind == "bad_json" else body)


async def one_request(client: httpx.AsyncClient, url: str, kind: str, index: int) -> tuple[int | None, str]:
    key, body = request_for(kind, index)
    headers = {"Authorization": f"Bearer {key}"}
    content = body if isinstance(body, bytes) else None
    payload = None if isinstance(body, bytes) else body
    try:
        async with client.stream("POST", url, json=payload, content=content, headers=headers) as answer:
            if kind == "gone":
                async for _ in answer.aiter_raw():
                    break  # the first chunk, then leave: the gateway must abort the upstream request
                return answer.status_code, ""
            data = await answer.aread()
            if answer.status_code == 200 and kind.startswith("stream") and not data.endswith(b"data: [DONE]\n\n"):
                return None, f"{kind}: stream without [DONE]"
            return answer.status_code, ""
    except httpx.HTTPError as error:
        return None, f"{kind}: {type(error).__name__}: {error}"


async def drive(origin: str, pid: int, seconds: float, rate: float, sample_every: float) -> Report:
    report = Report(seconds=seconds, rate=rate)
    process = psutil.Process(pid)
    statuses: dict[str, Counter[int | None]] = {kind: Counter() for kind in EXPECTED}
    url = origin + "/v1/chat/completions"
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        started = time.monotonic()

        async def run(index: int) -> None:
            kind = CYCLE[index % len(CYCLE)]
            status, problem = await one_request(client, url, kind, index)
            statuses[kind][status] += 1
            if status not in EXPECTED[kind]:
                report.lost += 1
                if len(report.lost_examples) < 10:
                    report.lost_examples.append(problem or f"{kind}: HTTP {status}")

        async def sample() -> None:
            while True:
                memory = process.memory_info()
                report.samples.append(Sample(round(time.monotonic() - started, 2), memory.rss / 2**20,
                                             process.num_fds(), process.num_threads(), report.sent))
                await asyncio.sleep(sample_every)

        sampler = asyncio.create_task(sample())
        tasks: set[asyncio.Task[None]] = set()
        index = 0
        while (now := time.monotonic() - started) < seconds:
            due = index / rate
            if due > now:
                await asyncio.sleep(due - now)
            task = asyncio.create_task(run(index))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            index += 1
            report.sent = index
        await asyncio.gather(*tasks)
        await asyncio.sleep(1)  # one more sample once everything is back
        sampler.cancel()
        metrics = (await client.get(origin + "/metrics")).text
        report.in_flight_after = sum(float(line.split()[-1]) for line in metrics.splitlines()
                                     if line.startswith("prefixgate_replica_in_flight{"))
    report.by_kind = {kind: {str(status): count for status, count in sorted(c.items(), key=str)}
                      for kind, c in statuses.items()}
    return report


def soak(seconds: float, rate: float, workdir: Path, sample_every: float = 2.0) -> Report:
    """Start the fake upstream and prefixgate (with a small corpus ingested for the rag tenant), drive
    them for ``seconds`` at ``rate`` requests a second, stop them; returns what was seen."""
    port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "tests.support.fake_upstream", "--port", str(port)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        config = gateway_config(f"http://127.0.0.1:{port}")
        docs = workdir / "docs"
        docs.mkdir(exist_ok=True)
        for name, text in DOCUMENTS.items():
            (docs / name).write_text(text)
        config_path = workdir / "ingest.yaml"
        config_path.write_text(yaml.safe_dump({**config, "data_dir": str(workdir)}))
        subprocess.run([sys.executable, "-m", "proxy", "ingest", str(docs), "--tenant", "rag", "--quiet",
                        "--config", str(config_path)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        gateway, origin = start_gateway(config, workdir, name="soak-gateway")
        try:
            report = asyncio.run(drive(origin, gateway.pid, seconds, rate, sample_every))
        finally:
            stop_gateway(gateway)
        report.upstream_aborts = httpx.get(f"http://127.0.0.1:{port}/_stats").json()["disconnects"]
        return report
    finally:
        upstream.terminate()
        upstream.wait(10)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = results["samples"]
    at = [s["at"] / 60 for s in samples]
    figure, (memory, fds) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    memory.plot(at, [s["rss_mb"] for s in samples])
    memory.set_ylabel("gateway RSS (MB)")
    warm = results["seconds"] * WARMUP_SHARE / 60
    for axis in (memory, fds):
        axis.axvline(warm, color="grey", linestyle=":", label="end of warm-up")
    memory.legend(loc="lower right")
    fds.plot(at, [s["fds"] for s in samples], color="tab:orange")
    fds.set_ylabel("open file descriptors")
    fds.set_xlabel("minutes")
    figure.suptitle(f"prefixgate soak: {results['rate']:.0f} requests/s of mixed traffic")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def table(report: Report, minutes: float, where: str | None = None) -> str:
    growth = report.growth()
    lines = [f"Command: `python tests/bench/soak.py --minutes {minutes:g} --rate {report.rate:g}`; one run, "
             f"{date.today().isoformat()}, on {where or machine.machine()} (fake upstream in its own process).", "",
             "| kind | answers by status |", "|---|---|"]
    for kind, statuses in report.by_kind.items():
        lines.append(f"| {kind} | " + ", ".join(f"{status}: {count}" for status, count in statuses.items()) + " |")
    lines += ["", f"{report.sent} requests; lost (no answer, or a status its kind never gets): {report.lost}; "
              f"upstream requests aborted for clients that left: {report.upstream_aborts} (of "
              f"{sum(report.by_kind['gone'].values())} that left); requests in flight afterwards: "
              f"{report.in_flight_after:g}.",
              f"Gateway RSS after warm-up (first {WARMUP_SHARE:.0%} of the run) {growth['rss_after_warmup_mb']} MB, "
              f"at the end {growth['rss_at_end_mb']} MB: growth {growth['rss_growth_pct']} % (target <= 5 %); "
              f"peak {growth['peak_rss_mb']} MB. Open descriptors: {growth['fds_after_warmup']:g} after warm-up, "
              f"{growth['fds_at_end']:g} at the end."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", choices=["fake", "full"], default="fake",
                        help="fake: the gateway before the fake upstream; full: as users run it (soak_full.py)")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=float, help="requests a second (default: 40 fake, 6 full)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--ingest-every", type=float, default=30, help="full: seconds between fresh ingests")
    parser.add_argument("--kill-ingest-every", type=float, default=300,
                        help="full: seconds between big ingests killed mid-way")
    parser.add_argument("--keep", action="store_true", help="full: keep the run's folder (logs, store)")
    parser.add_argument("--no-publish", action="store_true", help="full: print the table, write no docs")
    args = parser.parse_args()
    if args.stack == "full":
        from tests.bench import soak_full

        args.rate = args.rate or 6
        soak_full.main(args)
        return
    args.rate = args.rate or 40
    with tempfile.TemporaryDirectory() as workdir:
        report = soak(args.minutes * 60, args.rate, Path(workdir))
    where = machine.machine()
    print(table(report, args.minutes, where))
    if report.lost_examples:
        print("lost:", *report.lost_examples, sep="\n  ")
    results = {**asdict(report), "growth": report.growth()}
    meta = {"date": date.today().isoformat(), "where": where, "minutes": args.minutes, "rate": args.rate,
            "command": command_line("soak.py", sys.argv[1:]), "runs": 1}
    publish(args.out, "soak", meta, results, table(report, args.minutes, where),
            "Gateway RSS and open descriptors over the soak", plot)


if __name__ == "__main__":
    main()
