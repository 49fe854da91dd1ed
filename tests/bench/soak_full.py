"""The full soak (`python tests/bench/soak.py --stack full`): prefixgate as users run it, for minutes,
with the faults operators meet.

Two workers, Redis, retrieval from the embedded store, `balance: kv_events` over two vLLM CPU engines
(soak_stack); JSON and SSE traffic at a fixed rate, clients that leave mid-stream (soak_traffic); an
ingest of fresh documents every 30 s and a big one killed with SIGKILL every 5 minutes (soak_ingest);
one engine killed with SIGKILL at 40 % of the run (at the first moment after it that the engine serves a
request) and started again on its port. Every process is sampled (soak_samples); soak_full_report judges
and writes it up. This module only runs the schedule, and makes sure every process it started is gone
when it returns, however it returns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from proxy.engine.process import EngineError
from tests.bench import machine
from tests.bench.report import command_line
from tests.bench.soak_full_report import by_label, judge, publish_full, table
from tests.bench.soak_ingest import Ingest, Ingests, check_store, write_batch
from tests.bench.soak_samples import Samples
from tests.bench.soak_stack import Stack, running_stack
from tests.bench.soak_traffic import Outcome, drive

KILL_ENGINE_AT = 0.4  # of the run
LAST_QUARTER_AT = 0.75  # of the run: each engine's finished requests are read here and at the end
SERVING_WAIT_S = 30.0  # after it, how long the kill may wait for engine 0 to be serving a request
SAMPLE_EVERY_S = 2.0


@dataclass
class Schedule:
    seconds: float
    rate: float
    ingest_every: float = 30.0
    kill_ingest_every: float = 300.0

    def ingests(self) -> list[tuple[float, str]]:
        """(seconds into the run, "fresh" or "killed"): killed ones halfway between two fresh ones, none in the
        last 20 s (the run waits for each to end)."""
        fresh = [(self.ingest_every * n, "fresh") for n in range(1, int(self.seconds // self.ingest_every) + 1)]
        killed = [(self.kill_ingest_every * n + self.ingest_every / 2, "killed")
                  for n in range(1, int(self.seconds // self.kill_ingest_every) + 1)]
        return sorted(when for when in fresh + killed if when[0] < self.seconds - 20)


@dataclass
class Run:
    """What happened, as the soak saw it."""

    outcomes: list[Outcome] = field(default_factory=list)
    samples: Samples = field(default_factory=Samples)
    fault: dict[str, Any] = field(default_factory=dict)  # killed_at, restarted_at, healthy_at, what it was doing
    quarter: dict[str, Any] = field(default_factory=dict)  # each engine's finished requests at LAST_QUARTER_AT
    after: dict[str, Any] = field(default_factory=dict)  # the gateway's and engines' metrics once traffic ended
    versions: dict[str, str] = field(default_factory=dict)


async def kill_one_engine(stack: Stack, started: float, at: float, fault: dict[str, Any]) -> None:
    """SIGKILL to engine 0 at ``at`` seconds into the run, then the same engine started on its port."""
    await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
    async with httpx.AsyncClient(timeout=5) as client:  # what each engine had done, and engine 0 was doing
        deadline = time.monotonic() + SERVING_WAIT_S
        while True:  # a kill while it serves something, so its requests' fate is seen
            pages = [(await client.get(engine.origin + "/metrics")).text for engine in stack.engines]
            serving = sum(by_label(pages[0], name, "").get("", 0) for name in
                          ("vllm:num_requests_running", "vllm:num_requests_waiting"))
            if serving or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    fault["serving_at_kill"] = serving
    fault["finished_before_kill"] = [sum(by_label(page, "vllm:request_success_total", "").values()) for page in pages]
    fault["killed_at"] = round(time.monotonic() - started, 3)
    await asyncio.to_thread(stack.kill_engine, 0)
    fresh = stack.restart_engine(0)  # on this thread: the engine ends with the thread that started it
    fault["restarted_at"] = round(time.monotonic() - started, 3)
    try:
        await asyncio.to_thread(fresh.wait_ready, 300)
    except EngineError as error:  # reported, not raised: the run goes on with one engine and says so
        fault["restart_failed"] = str(error)[-2000:]
        return
    fault["healthy_at"] = round(time.monotonic() - started, 3)


async def finished_at(stack: Stack, started: float, at: float, quarter: dict[str, Any]) -> None:
    """Each engine's finished requests ``at`` seconds into the run: with those at the end, the last quarter's."""
    await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
    async with httpx.AsyncClient(timeout=5) as client:
        pages = []
        for engine in stack.engines:
            try:
                pages.append((await client.get(engine.origin + "/metrics")).text)
            except httpx.HTTPError:
                pages.append("")
    quarter["at"] = round(time.monotonic() - started, 3)
    quarter["finished"] = [sum(by_label(page, "vllm:request_success_total", "").values()) for page in pages]


async def ingest_while_serving(ingests: Ingests, schedule: Schedule, started: float) -> None:
    tasks = []
    for at, kind in schedule.ingests():
        await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
        tasks.append(asyncio.create_task(ingests.fresh() if kind == "fresh" else ingests.killed()))
    await asyncio.gather(*tasks)


async def exercise(stack: Stack, ingests: Ingests, schedule: Schedule) -> Run:
    run, started = Run(), ingests.started
    sampler = asyncio.create_task(run.samples.every(SAMPLE_EVERY_S, started, stack.processes))
    chores = [asyncio.create_task(ingest_while_serving(ingests, schedule, started)),
              asyncio.create_task(kill_one_engine(stack, started, schedule.seconds * KILL_ENGINE_AT, run.fault)),
              asyncio.create_task(finished_at(stack, started, schedule.seconds * LAST_QUARTER_AT, run.quarter))]
    try:
        await drive(stack.origin, started, schedule.seconds, schedule.rate, run.outcomes)
        await asyncio.gather(*chores)
        await asyncio.sleep(SAMPLE_EVERY_S)  # settle, then read what is left in flight
        run.samples.take(round(time.monotonic() - started, 2), stack.processes())
        run.after = await read_after(stack)
    finally:
        for task in [sampler, *chores]:
            task.cancel()
        await asyncio.gather(sampler, *chores, return_exceptions=True)
    return run


async def read_after(stack: Stack) -> dict[str, Any]:
    """The gateway's /metrics (every worker's, added up) and each engine's, once the last answer is in."""
    async with httpx.AsyncClient(timeout=10) as client:

        async def page(origin: str) -> str:
            try:
                return (await client.get(origin + "/metrics")).text
            except httpx.HTTPError:  # an engine that did not come back: nothing to read
                return ""

        return {"gateway_metrics": await page(stack.origin),
                "engine_metrics": [await page(engine.origin) for engine in stack.engines]}


def detected_versions(stack: Stack) -> dict[str, str]:
    """The caption's software, read from what runs."""
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    found = re.search(r"v=(\S+)", redis)
    return {"machine": machine.machine(), "engine": machine.engine_version(stack.engines[1].origin),
            "redis": f"redis-server {found.group(1) if found else '(version unknown)'}",
            "python packages": ", ".join(v for v in (machine.version("uvicorn"), machine.version("qdrant-edge"),
                                                     machine.version("redis")) if v)}


def gateway_log_problems(workdir: Path, limit: int = 8) -> dict[str, Any]:
    """ERROR lines and tracebacks the gateway logged: its own account of anything that went wrong."""
    lines = (workdir / "gateway.log").read_text(errors="replace").splitlines()
    found = []  # an ERROR line, or the line that introduced a traceback (chained ones counted once)
    for number, line in enumerate(lines):
        if " ERROR " in line or " CRITICAL " in line:
            found.append(line)
        elif line.startswith("Traceback") and number and not lines[number - 1].startswith(("The above", "During")) \
                and lines[number - 1].strip():
            found.append(lines[number - 1])
    return {"count": len(found), "examples": found[:limit]}


def soak_full(schedule: Schedule, keep: bool = False) -> dict[str, Any]:
    """Start the stack, run the schedule, stop everything, check the store; returns the judged results."""
    began = time.monotonic()
    where = contextlib.nullcontext(tempfile.mkdtemp(prefix="soak-full-")) if keep else \
        tempfile.TemporaryDirectory(prefix="soak-full-")
    with where as temporary:
        folder = Path(temporary)
        first_words = write_batch(folder / "batches" / "b0000", 0, 8, paragraphs=2)
        with running_stack(folder, folder / "batches" / "b0000") as stack:
            ingests = Ingests(folder, stack.config_path, time.monotonic())
            ingests.done.append(Ingest(0, "fresh", {str(Path(p).relative_to(folder)): w for p, w in
                                                    first_words.items()}, 0.0, 0.0, 0))
            try:
                run = asyncio.run(exercise(stack, ingests, schedule))
            finally:
                ingests.stop_all()
            run.versions = detected_versions(stack)
        store = asyncio.run(check_store(stack.config_path, ingests.done))
        results = judge(run, ingests.done, store, schedule.seconds, schedule.rate)
        results["gateway_log"] = gateway_log_problems(folder)
        results["wall_s"] = round(time.monotonic() - began, 1)
        if keep:
            (folder / "results.json").write_text(json.dumps(results, indent=1))
            print(f"kept the run's folder (results.json, logs, store): {folder}", file=sys.stderr)
    return results


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> None:
    """``soak.py --stack full``: a SIGTERM ends the run as Ctrl-C does, through every finally."""
    signal.signal(signal.SIGTERM, _interrupt)
    schedule = Schedule(args.minutes * 60, args.rate, args.ingest_every, args.kill_ingest_every)
    results = soak_full(schedule, keep=args.keep)
    command = command_line("soak.py", sys.argv[1:])
    print(table(results, command))
    for example in results["lost_examples"]:
        print("lost:", example, file=sys.stderr)
    print(f"the run took {results['wall_s']:.0f} s in all, start-up and checks included", file=sys.stderr)
    if not args.no_publish:
        publish_full(args.out, results, command)
