"""Routing and admission on real vLLM CPU engines (issue 5): prefix affinity, length routing, overload.

Three experiments, each against tiny-model engines started here (compute thread bound to a core):
  affinity  several engines; a multi-tenant workload (each tenant's requests share its app's system
            prompt, tenants' requests are isolated by cache_salt) sent by a closed loop of workers
            to one engine alone, round-robin over all engines (what a Kubernetes Service does), and
            through prefixgate (prefix affinity with bounded loads). Reported: the engines' own
            prefix-cache hit rate (vllm:prefix_cache_hits / queries, in tokens) and each engine's
            time-averaged requests in flight (vllm:num_requests_running + waiting, sampled).
  length    two engines; an open-loop mix of 80 % short answers (<= 64 tokens) and 20 % long ones
            (512 tokens), through prefixgate with one pool of both engines vs a short and a long
            pool of one engine each, at each rate of --length-rate (a comma list sweeps: the split
            pays once long answers hold the engines' batch slots). Reported: short and long
            requests' TTFT p50/p95, output tokens per second, per-pass paired p95 ratios.
  overload  one engine behind a pool with max_in_flight; capacity measured closed-loop at that
            concurrency, then open-loop arrivals at 0.3x and 3x capacity through prefixgate, and 3x
            sent directly, --repeats passes. Reported: admitted requests' TTFT p50/p99, the share
            shed, how fast a shed request is answered.
Writes the tables into docs/benchmarks.md (block --name, "routing" by default), the numbers to
docs/NAME.json, plots to docs/NAME.png (matplotlib: pip install -e '.[bench]').

    python tests/bench/routing.py [--only affinity,length,overload] [--engines 3]
    python tests/bench/routing.py --only length --max-num-seqs 2 --length-rate 4,5,6,7 \\
        --length-seconds 60 --name routing_slots
    python tests/bench/routing.py --only affinity --kv-events --kv-blocks 160 --max-num-seqs 4 \\
        --cases "round-robin;prefixgate;prefixgate, KV events;prefixgate, KV events, four processes" \\
        --name routing_kv_constrained
    python tests/bench/routing.py --render docs/NAME.json   # the tables and plot again, no engines
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.prompt.cache_salt import tenant_salt  # noqa: E402
from proxy.engine.process import LocalEngine, free_port  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.open_loop import percentile, schedule  # noqa: E402
from tests.bench.processes import BENCH_SALT_SECRET, start_engine, start_gateway, stop_gateway  # noqa: E402
from tests.bench.report import command_line, publish  # noqa: E402
from tests.support.metrics_text import sample_sum  # noqa: E402

MODEL = "prefixgate-tiny"
Body = dict[str, Any]
_WORDS = ("ledger", "invoice", "carrier", "refund", "warehouse", "policy", "contract", "shipment", "audit", "quota",
          "region", "customer", "supplier", "discount", "renewal", "ticket", "outage", "backlog", "forecast", "tariff")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)) + "."


# ---- the load generator -------------------------------------------------------------------------

@dataclass
class Outcome:
    kind: str  # the workload's label for the request ("short", "long", ...)
    status: int
    ttft: float | None  # seconds from the scheduled start to the first data chunk
    seconds: float  # to the end of the answer
    chunks: int = 0


async def _send(session: aiohttp.ClientSession, url: str, body: Body, kind: str, due: float,
                headers: dict[str, str]) -> Outcome:
    first, chunks, status = None, 0, 0
    try:
        async with session.post(url, json=body, headers=headers) as response:
            status = response.status
            async for line in response.content:
                if line.startswith(b"data: {"):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - due
    except (aiohttp.ClientError, TimeoutError):
        status = status or 599
    return Outcome(kind, status, first, time.perf_counter() - due, chunks)


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600))


async def explained(session: aiohttp.ClientSession, gateways: list[str], body: Body, tenant: str) -> list[str] | None:
    """The replica each gateway names for ``body`` now (``POST /admin/route/...``, which sends nothing);
    None when a gateway did not answer twice (a keep-alive connection closing under the request)."""
    async def one(origin: str) -> str | None:
        for _ in range(2):
            try:
                async with session.post(origin + "/admin/route/v1/chat/completions", json=body,
                                        headers={"x-prefixgate-tenant": tenant}) as answer:
                    return str((await answer.json()).get("replica"))
            except (aiohttp.ClientError, TimeoutError):
                continue
        return None

    named = await asyncio.gather(*(one(origin) for origin in gateways))
    return None if None in named else [name for name in named if name is not None]


async def closed_loop(targets: list[str], requests: list[tuple[Body, str, dict[str, str]]],
                      workers: int, ask_all: bool = False) -> tuple[list[Outcome], list[tuple[int, list[str]]]]:
    """``workers`` clients, each sending its next request when its last answer ended; request i goes
    to targets[i % len(targets)] (one target, or round-robin). With ``ask_all`` (targets are gateways,
    the request's kind its tenant), each request is first explained by every gateway at once: the
    second list holds, per request, the gateway that will send it and the replica each one names."""
    queue = list(enumerate(requests))
    queue.reverse()
    outcomes: list[Outcome] = []
    choices: list[tuple[int, list[str]]] = []
    async with _session() as session:
        async def worker() -> None:
            while queue:
                index, (body, kind, headers) = queue.pop()
                sender = index % len(targets)
                if ask_all:
                    named = await explained(session, targets, body, kind)
                    if named is not None:  # a request none could explain is left out of the agreement
                        choices.append((sender, named))
                url = targets[sender] + "/v1/chat/completions"
                outcomes.append(await _send(session, url, body, kind, time.perf_counter(), headers))

        await asyncio.gather(*(worker() for _ in range(workers)))
    return outcomes, choices


def agreement(choices: list[tuple[int, list[str]]]) -> dict[str, float]:
    """Of the explained requests: the share every gateway named the same replica for, and the share for
    which the sending gateway named the replica the first gateway (one gateway alone) would have."""
    if not choices:
        return {}
    return {"all_agree": sum(len(set(named)) == 1 for _, named in choices) / len(choices),
            "as_one_gateway": sum(named[sender] == named[0] for sender, named in choices) / len(choices),
            "explained": len(choices)}


async def open_loop(target: str, make: Any, rate: float, seconds: float, seed: int) -> tuple[list[Outcome], float]:
    """Poisson arrivals at ``rate``/s for ``seconds``; ``make(rng)`` gives (body, kind). Returns the
    outcomes and the wall time until the last answer ended."""
    rng = random.Random(seed)
    async with _session() as session:
        start = time.perf_counter() + 0.05
        tasks = []
        for offset in schedule(rate, seconds, seed):
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body, kind = make(rng)
            tasks.append(asyncio.create_task(_send(session, target + "/v1/chat/completions", body, kind, due, {})))
        outcomes = list(await asyncio.gather(*tasks))
    return outcomes, time.perf_counter() - start


class LoadSampler:
    """Each engine's requests in flight (running + waiting, from its /metrics), sampled by a task
    beside the load."""

    def __init__(self, engines: list[str], interval: float = 0.25) -> None:
        self.engines = engines
        self.interval = interval
        self.samples: list[list[float]] = [[] for _ in engines]
        self._stop = asyncio.Event()

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            while not self._stop.is_set():  # all engines at once, so the samples line up in time
                answers = await asyncio.gather(*(client.get(origin + "/metrics") for origin in self.engines))
                for index, answer in enumerate(answers):
                    self.samples[index].append(sample_sum(answer.text, "vllm:num_requests_running")
                                               + sample_sum(answer.text, "vllm:num_requests_waiting"))
                try:
                    await asyncio.wait_for(self._stop.wait(), self.interval)
                except TimeoutError:
                    pass

    def stop(self) -> None:
        self._stop.set()

    def means(self) -> list[float]:
        return [statistics.fmean(s) if s else 0.0 for s in self.samples]


def engine_counters(engines: list[str]) -> tuple[float, float, list[float]]:
    """Prefix-cache hits and queries (tokens) summed over the engines, and each engine's finished
    requests, from one read of each engine's /metrics."""
    hits = queries = 0.0
    served = []
    for origin in engines:
        text = httpx.get(origin + "/metrics", timeout=10).text
        hits += sample_sum(text, "vllm:prefix_cache_hits_total")
        queries += sample_sum(text, "vllm:prefix_cache_queries_total")
        served.append(sample_sum(text, "vllm:request_success_total"))
    return hits, queries, served


def reset_caches(engines: list[str]) -> None:
    for origin in engines:
        httpx.post(origin + "/reset_prefix_cache", timeout=30).raise_for_status()


def _ms(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (seconds) in ms; None where there are none (null in the result file:
    JSON has no NaN)."""
    return percentile([v * 1000 for v in values], q) if values else None


def _median(values: Iterable[float | None]) -> float | None:
    """The median over passes; None when any pass has no figure (a case that shed nothing has no shed latency)."""
    values = list(values)
    return None if any(v is None for v in values) else statistics.median(values)


def _present(values: Iterable[float | None]) -> list[float]:
    """The passes' figures, leaving out the passes that had none."""
    return [v for v in values if v is not None]


def _cell(value: float | None, spec: str) -> str:
    """A table cell: the figure, or "-" where there is none."""
    return "-" if value is None else format(value, spec)


def _range(values: Iterable[float | None], spec: str) -> str:
    """`` (min-max)`` of the passes that have a figure; nothing when none has."""
    present = _present(values)
    return f" ({min(present):{spec}}-{max(present):{spec}})" if present else ""


# ---- affinity -------------------------------------------------------------------------------------

def affinity_workload(tenants: int, apps: int, questions: int, prompt_words: int,
                      seed: int = 7, model: str = MODEL) -> list[tuple[Body, str, dict[str, str]]]:
    """Each tenant runs ``apps`` apps, each with its own long system prompt; every question is new.
    Shuffled, so apps interleave as real traffic does."""
    rng = random.Random(seed)
    requests = []
    for tenant in range(tenants):
        name = f"tenant-{tenant}"
        for app in range(apps):
            system = f"You are {name}'s assistant for app {app}. " + _text(rng, prompt_words)
            for _ in range(questions):
                body = {"model": model, "max_tokens": 16, "ignore_eos": True, "stream": True,
                        "messages": [{"role": "system", "content": system},
                                     {"role": "user", "content": "Question: " + _text(rng, 12)}]}
                requests.append((body, name, {"Authorization": f"Bearer sk-bench-{name}"}))
    rng.shuffle(requests)
    return requests


def _affinity_case(targets: list[str], requests: list[tuple[Body, str, dict[str, str]]], measured: list[str],
                   origins: list[str], workers: int, ask_all: bool = False) -> dict[str, Any]:
    """One pass of the workload with cold caches; the engines' hit rate and load while it ran, and with
    ``ask_all`` how often the gateways agreed on each request's replica (``agreement``)."""
    reset_caches(origins)
    hits0, queries0, served0 = engine_counters(measured)
    sampler = LoadSampler(measured)

    async def run() -> tuple[list[Outcome], list[tuple[int, list[str]]]]:
        sampling = asyncio.create_task(sampler.run())
        try:
            return await closed_loop(targets, requests, workers, ask_all=ask_all)
        finally:
            sampler.stop()
            await sampling

    started = time.perf_counter()
    outcomes, choices = uvloop.run(run())
    wall = time.perf_counter() - started
    hits1, queries1, served1 = engine_counters(measured)
    served = [after - before for after, before in zip(served1, served0, strict=True)]
    loads = sampler.means()
    ttfts = [o.ttft for o in outcomes if o.status == 200 and o.ttft is not None]
    return {
        "hit_rate": (hits1 - hits0) / max(queries1 - queries0, 1),
        "errors": sum(o.status != 200 for o in outcomes),
        "in_flight_per_engine": loads,
        "max_over_mean": max(loads) / statistics.fmean(loads) if statistics.fmean(loads) else 0.0,
        "requests_per_engine": served,
        "requests_max_over_mean": max(served) / statistics.fmean(served) if any(served) else 0.0,
        "ttft_p50_ms": _ms(ttfts, 0.5), "ttft_p95_ms": _ms(ttfts, 0.95), "req_per_s": len(outcomes) / wall,
        **agreement(choices),
    }


def run_affinity(origins: list[str], tokenizer: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Each case ``args.repeats`` times, interleaved (the 2-core VM's speed drifts); rows hold medians.
    ``tokenizer``: the engines' model folder, which the KV-event cases read prompts' tokens with."""
    workload = affinity_workload(args.tenants, args.apps, args.questions, args.prompt_words, model=args.model)
    # The gateway isolates tenants with cache_salt; the direct runs send the same salt, so the
    # engines see identical prompts whichever way they come.
    direct = [({**body, "cache_salt": tenant_salt(BENCH_SALT_SECRET.encode(), kind)}, kind, headers)
              for body, kind, headers in workload]

    def config(**pool: Any) -> dict[str, Any]:
        return {"pools": [{"name": "chat", "replicas": [o + "/v1" for o in origins], "models": [args.model], **pool}],
                "auth": {"keys": [{"tenant": f"tenant-{t}", "key": f"sk-bench-tenant-{t}"}
                                  for t in range(args.tenants)]}}

    # prefixgate as configured by default (--home-slack aside); the same as two independent processes
    # that share the engines, requests alternating between them (each sees the other's load only in
    # the engines' /metrics, and keeps its own memory of warm replicas); without the memory of warm
    # replicas; and as the bare bounded-load ring. Each pass gets fresh gateways: the engines' caches
    # are reset between passes, and a gateway's memory of where prefixes are warm would be stale.
    gateways = {"prefixgate": (config(home_slack=args.home_slack), 1),
                "prefixgate, two processes": (config(home_slack=args.home_slack), 2),
                "prefixgate, warm memory off": (config(home_slack=args.home_slack, warm_memory_s=0), 1),
                "prefixgate, bare ring": (config(home_slack=0, warm_memory_s=0), 1)}
    if args.kv_events:  # routing by the blocks the engines report; four processes: does each reach the same choice?
        # engines that do not name their event socket (GET /kv_event_sources) get it from --kv-endpoints
        sockets = {"endpoints": args.kv_endpoints.split(",")} if args.kv_endpoints else {}
        by_events = config(home_slack=args.home_slack, balance="kv_events",
                           kv_events={"tokenizer": tokenizer, **sockets})
        by_shared = config(home_slack=args.home_slack, balance="kv_events",
                           kv_events={"tokenizer": tokenizer, **sockets, "shared_load": True})
        # a holder may take twice the mean load (not the default three times) before its prompt is prefilled elsewhere
        by_narrow = config(home_slack=args.home_slack, balance="kv_events",
                           kv_events={"tokenizer": tokenizer, **sockets, "held_bound": 2.0})
        gateways |= {"prefixgate, KV events": (by_events, 1), "prefixgate, KV events, four processes": (by_events, 4),
                     "prefixgate, KV events, four processes, shared load": (by_shared, 4),
                     "prefixgate, KV events, held_bound 2": (by_narrow, 1)}
    cases = {"single engine": ([origins[0]], direct, origins[:1]),
             "round-robin": (origins, direct, origins),
             **{name: ([], workload, origins) for name in gateways}}
    if args.cases:
        cases = {name: case for name, case in cases.items() if name in args.cases.split(";") or name == "single engine"}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    began = time.monotonic()
    for number in range(args.repeats):
        spent = time.monotonic() - began
        if args.budget and number and spent / number > args.budget - spent:  # no time for another whole pass
            print(f"affinity: {number} passes in {spent:.0f} s; no time for another within --budget", flush=True)
            break
        for name, (targets, requests, measured) in cases.items():
            processes = []
            try:
                if not targets:
                    settings, count = gateways[name]
                    for n in range(count):
                        process, origin = start_gateway(settings, workdir, f"affinity{n}")
                        processes.append(process)
                        targets = [*targets, origin]
                runs[name].append(_affinity_case(targets, requests, measured, origins, args.workers,
                                                 ask_all=len(processes) > 1))
            finally:
                for process in processes:
                    stop_gateway(process)
            print("affinity", name, json.dumps(runs[name][-1]), flush=True)
    return {name: {**{key: _median(row[key] for row in rows)
                      for key in ("hit_rate", "max_over_mean", "requests_max_over_mean", "ttft_p50_ms", "ttft_p95_ms")},
                   "errors": sum(row["errors"] for row in rows), "runs": rows}
            for name, rows in runs.items()}


# ---- length routing -------------------------------------------------------------------------------

def length_request(rng: random.Random) -> tuple[Body, str]:
    long = rng.random() < 0.2
    output = 512 if long else rng.randint(16, 64)
    body = {"model": MODEL, "max_tokens": output, "ignore_eos": True, "stream": True,
            "messages": [{"role": "user", "content": _text(rng, 60)}]}
    return body, "long" if long else "short"


def _length_pass(outcomes: list[Outcome], wall: float) -> dict[str, Any]:
    short = [o.ttft for o in outcomes if o.kind == "short" and o.status == 200 and o.ttft is not None]
    long = [o.ttft for o in outcomes if o.kind == "long" and o.status == 200 and o.ttft is not None]
    return {"requests": len(outcomes), "errors": sum(o.status != 200 for o in outcomes),
            "short_ttft_p50_ms": _ms(short, 0.5), "short_ttft_p95_ms": _ms(short, 0.95),
            "long_ttft_p50_ms": _ms(long, 0.5), "long_ttft_p95_ms": _ms(long, 0.95),
            "output_tok_per_s": sum(o.chunks for o in outcomes) / wall}


def run_length(engines: list[LocalEngine], workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Each arrival rate in ``args.length_rate`` (a comma list): where the split starts to pay
    depends on how often long answers hold the engines' batch slots."""
    return {rate: _length_at(engines, workdir, args, float(rate)) for rate in args.length_rate.split(",")}


def _length_at(engines: list[LocalEngine], workdir: Path, args: argparse.Namespace, rate: float) -> dict[str, Any]:
    """Both layouts ``args.repeats`` times, interleaved; a pass sends both the same arrivals (its own
    seed), so each pass gives a paired ratio. Rows hold medians; ``ratios`` the per-pass p95 ratios."""
    a, b = (engine.origin + "/v1" for engine in engines[:2])
    layouts = {
        "one pool of two engines": [{"name": "mixed", "replicas": [a, b], "models": [MODEL],
                                     "balance": "least_loaded"}],
        # min_recall 0: the split from the first request; here max_tokens tells each answer's length
        "short pool + long pool": [{"name": "short", "replicas": [a], "models": [MODEL], "output": "short",
                                    "min_recall": 0},
                                   {"name": "long", "replicas": [b], "models": [MODEL], "output": "long"}],
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in layouts}
    for number in range(args.repeats):
        for name, pools in layouts.items():
            gateway, origin = start_gateway({"pools": pools}, workdir, "length")
            try:
                outcomes, wall = uvloop.run(open_loop(origin, length_request, rate, args.length_seconds, 11 + number))
            finally:
                stop_gateway(gateway)
            runs[name].append(_length_pass(outcomes, wall))
            print("length", rate, name, json.dumps(runs[name][-1]), flush=True)
    mixed, split = runs.values()
    medians = {name: {key: _median(row[key] for row in rows) for key in rows[0] if key != "errors"}
               for name, rows in runs.items()}
    return {"layouts": {name: {**medians[name], "errors": sum(row["errors"] for row in rows), "runs": rows}
                        for name, rows in runs.items()},
            "ratios": [None if m["short_ttft_p95_ms"] is None or not s["short_ttft_p95_ms"]
                       else m["short_ttft_p95_ms"] / s["short_ttft_p95_ms"] for m, s in zip(mixed, split, strict=True)]}


# ---- overload -------------------------------------------------------------------------------------

def overload_request(rng: random.Random) -> tuple[Body, str]:
    return {"model": MODEL, "max_tokens": 32, "ignore_eos": True, "stream": True,
            "messages": [{"role": "user", "content": _text(rng, 80)}]}, "chat"


def _overload_row(outcomes: list[Outcome], wall: float, rate: float) -> dict[str, Any]:
    admitted = [o.ttft for o in outcomes if o.status == 200 and o.ttft is not None]
    shed = [o.seconds for o in outcomes if o.status in (429, 503)]
    return {"rate": rate, "requests": len(outcomes), "admitted": len(admitted), "shed": len(shed),
            "errors": sum(o.status not in (200, 429, 503) for o in outcomes),
            "ttft_p50_ms": _ms(admitted, 0.5), "ttft_p99_ms": _ms(admitted, 0.99),
            "shed_p50_ms": _ms(shed, 0.5), "shed_p99_ms": _ms(shed, 0.99),
            "shed_max_ms": max(shed) * 1000 if shed else None, "wall_s": wall}


def run_overload(engine: LocalEngine, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The engine has its core; prefixgate and the client get the others, as on separate hardware.
    Each of ``args.repeats`` passes sends every case its own arrivals (the pass's seed), interleaved;
    rows hold medians over passes, ``runs`` each pass, ``ratios`` each pass's admitted-p99 ratio."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        os.sched_setaffinity(0, set(cores) - {cores[-1]})  # the gateway started below inherits this
    rng = random.Random(5)
    warm = [(overload_request(rng)[0], "chat", {}) for _ in range(args.max_in_flight * 20)]
    started = time.perf_counter()
    uvloop.run(closed_loop([engine.origin], warm, args.max_in_flight))
    capacity = len(warm) / (time.perf_counter() - started)
    print(f"overload: capacity {capacity:.1f} req/s at {args.max_in_flight} in flight", flush=True)
    config = {"pools": [{"name": "chat", "replicas": [engine.origin + "/v1"], "models": [MODEL],
                         "max_in_flight": args.max_in_flight, "queue_size": args.queue_size,
                         "queue_timeout": 5}]}
    cases = (("prefixgate, 0.3x capacity", True, 0.3), ("prefixgate, 3x capacity", True, 3.0),
             ("direct, 3x capacity", False, 3.0))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in cases}
    for number in range(args.repeats):
        gateway, origin = start_gateway(config, workdir, "overload")
        try:
            for name, through_gateway, factor in cases:
                rate = capacity * factor
                target = origin if through_gateway else engine.origin
                outcomes, wall = uvloop.run(open_loop(target, overload_request, rate, args.overload_seconds,
                                                      3 + number))
                runs[name].append(_overload_row(outcomes, wall, rate))
                print("overload", number + 1, name, json.dumps(runs[name][-1]), flush=True)
        finally:
            stop_gateway(gateway)
    rows = {name: {**{key: _median(row[key] for row in passes) for key in passes[0]}, "runs": passes}
            for name, passes in runs.items()}
    calm, loaded = runs["prefixgate, 0.3x capacity"], runs["prefixgate, 3x capacity"]
    return {"capacity_req_per_s": capacity, "max_in_flight": args.max_in_flight, "queue_size": args.queue_size,
            "cases": rows,
            "ratios": [None if hot["ttft_p99_ms"] is None or not cool["ttft_p99_ms"]
                       else hot["ttft_p99_ms"] / cool["ttft_p99_ms"] for cool, hot in zip(calm, loaded, strict=True)]}


# ---- report ---------------------------------------------------------------------------------------

def _ratio(runs: list[dict[str, Any]], base: list[dict[str, Any]]) -> str:
    """One case's hit rate over another's, pass by pass: the median of the passes' ratios and their range, and
    the ratio of the two medians where it reads differently (the table shows the medians)."""
    ratios = [run["hit_rate"] / max(other["hit_rate"], 1e-9) for run, other in zip(runs, base, strict=True)]
    if len(ratios) == 1:
        return f"**{ratios[0]:.2f}x** (one pass)"
    of_medians = statistics.median(run["hit_rate"] for run in runs) / max(
        statistics.median(other["hit_rate"] for other in base), 1e-9)
    text = f"**{statistics.median(ratios):.2f}x** (median of per-pass ratios {min(ratios):.2f}-{max(ratios):.2f}"
    if f"{of_medians:.2f}" != f"{statistics.median(ratios):.2f}":
        text += f"; the ratio of the medians {of_medians:.2f}x"
    return text + ")"


def _shed_cells(runs: list[dict[str, Any]]) -> str:
    """A case's shed answers: p50 and p99 as the median of the passes (p99's range), and the slowest answer of
    all passes (the median of the passes' slowest would hide the worst)."""
    shedding = [run for run in runs if run["shed"]]
    if not shedding:
        return "- | -"
    if len(shedding) < len(runs):
        return f"- ({sum(run['shed'] for run in runs)} shed in {len(shedding)} of {len(runs)} passes) | " \
               f"{max(run['shed_max_ms'] for run in shedding):.1f}"
    p50 = statistics.median(run["shed_p50_ms"] for run in runs)
    p99 = [run["shed_p99_ms"] for run in runs]
    return (f"{p50:.1f} / {statistics.median(p99):.1f} ({min(p99):.1f}-{max(p99):.1f}) | "
            f"{max(run['shed_max_ms'] for run in runs):.1f}")


def _kv_summary(rows: dict[str, Any]) -> list[str]:
    """KV-event routing against today's rule, and four gateway processes against one, per pass."""
    if "prefixgate, KV events" not in rows:
        return []
    by_events = rows["prefixgate, KV events"]
    events, lines = by_events["runs"], []
    if "prefixgate" in rows:
        lines.append(f"- KV events / prefixgate's ring: hit rate {_ratio(events, rows['prefixgate']['runs'])}, "
                     f"load max/mean {by_events['max_over_mean']:.2f}.")
    narrow = rows.get("prefixgate, KV events, held_bound 2")
    if narrow is not None:
        single = rows.get("single engine")
        of_one = f", {by_events['hit_rate'] / single['hit_rate']:.2f}x one engine's" if single else ""
        lines.append(f"- The default `kv_events.held_bound` (3) / 2: hit rate {_ratio(events, narrow['runs'])}"
                     f"{of_one}; load max/mean {by_events['max_over_mean']:.2f} against "
                     f"{narrow['max_over_mean']:.2f}, TTFT p95 "
                     f"{_cell(by_events['ttft_p95_ms'], ',.0f')} ms against {_cell(narrow['ttft_p95_ms'], ',.0f')}.")
    fours = {"prefixgate, KV events, four processes": ("prefixgate, KV events", ""),
             "prefixgate, KV events, four processes, shared load": ("prefixgate, KV events",
                                                                     " with `kv_events.shared_load`")}
    for four_name, (one_name, setting) in fours.items():
        if four_name not in rows:
            continue
        four = rows[four_name]["runs"]
        label = "Four gateway processes" + setting
        lines.append(f"- {label} / one, both by KV events: hit rate "
                     f"{_ratio(four, rows.get(one_name, by_events)['runs'])}.")
        if all("all_agree" in run for run in four):
            agree = [run["all_agree"] for run in four]
            as_one = [run["as_one_gateway"] for run in four]
            lines.append(f"- {label}, asked each request's replica at once (`POST /admin/route`) "
                         f"before it was sent: all four named the same replica for **{statistics.median(agree):.1%}** "
                         f"of requests (passes {min(agree):.1%}-{max(agree):.1%}); the sending gateway named the one "
                         f"the first gateway named for **{statistics.median(as_one):.1%}** "
                         f"({min(as_one):.1%}-{max(as_one):.1%}).")
    return [*lines, ""]


def markdown(results: dict[str, Any], meta: dict[str, Any]) -> str:
    kv = f"{meta['kv_blocks']} KV blocks of 128 tokens" if meta["kv_blocks"] else "1 GiB of KV cache (~1M tokens)"
    note = f" ({meta['command_note']})" if meta.get("command_note") else ""
    command = f"Command: `{meta['command']}`{note}." if "command" in meta else ""
    if meta.get("engine_urls"):  # engines started by a GPU script, which describes them in --where
        command = ("Command: `KIT=.gpu WHEELS=.whl bash tests/bench/gpu_routing.sh`, which starts the engines and "
                   "runs this phase as `routing.py --engine-urls` (its arguments are in the result file).")
        caption = f"Run of {meta['date']} on {meta['where']}."
    else:
        caption = (f"Run of {meta['date']} on {meta['where']}; tiny model, one compute thread per engine, "
                   f"each engine bound to a core ({meta['cores']} cores shared by engines, prefixgate and the client); "
                   f"engines with {kv} and {meta['max_num_seqs']} batch slots (--max-num-seqs).")
    lines = [command, caption, ""]
    if "affinity" in results:
        lines += [f"**Prefix affinity** ({meta['engines']} engines; {meta['tenants']} tenants x {meta['apps']} apps, "
                  f"{meta['questions']} new questions per app, system prompts of ~{meta['prompt_words']} words, "
                  f"{meta['workers']} clients in a closed loop, 16 output tokens):", "",
                  "| sent | hit rate, median (range) | vs single engine | in flight max / mean, median (range) | "
                  "requests max / mean | TTFT p50 (ms) | TTFT p95 (ms) | errors |", "|---|---|---|---|---|---|---|---|"]
        single = results["affinity"]["single engine"]["hit_rate"]
        passes = len(next(iter(results["affinity"].values()))["runs"])
        if passes == 1:  # a single run: no median, no range
            lines[-2] = lines[-2].replace("hit rate, median (range)", "hit rate").replace(
                "in flight max / mean, median (range)", "in flight max / mean")
        for name, row in results["affinity"].items():
            hits = [run["hit_rate"] for run in row["runs"]]
            spread = [run["max_over_mean"] for run in row["runs"]]
            hit_range = f" ({min(hits):.3f}-{max(hits):.3f})" if passes > 1 else ""
            spread_range = f" ({min(spread):.2f}-{max(spread):.2f})" if passes > 1 else ""
            lines.append(f"| {name} | {row['hit_rate']:.3f}{hit_range} | "
                         f"{row['hit_rate'] / max(single, 1e-9):.2f} | {row['max_over_mean']:.2f}{spread_range} | "
                         f"{row['requests_max_over_mean']:.2f} | "
                         f"{_cell(row['ttft_p50_ms'], '.0f')} | {_cell(row['ttft_p95_ms'], '.0f')} | {row['errors']} |")
        each = (f"{passes} passes of each case, interleaved" if passes > 1
                else "1 pass of each case, interleaved: a single run, each figure one pass's")
        lines += ["", f"{each}. In flight: each "
                  "engine's running + waiting requests from its /metrics, sampled every 0.25 s and averaged over the "
                  "pass; requests: each engine's finished requests in the pass.", ""]
        lines += _kv_summary(results["affinity"])
    if "length" in results:
        lines += [f"**Length routing** (2 engines; Poisson arrivals for {meta['length_seconds']} s; 80 % short "
                  f"answers of 16-64 tokens, 20 % long of 512; {meta['repeats']} passes, medians; each request's "
                  "max_tokens is its true length (ignore_eos), so the split routes on known lengths: an oracle, "
                  "not a prediction):", "",
                  "| arrivals/s | layout | short TTFT p50 (ms) | short TTFT p95 (ms), median (range) | "
                  "long TTFT p50 (ms) | long TTFT p95 (ms) | output tok/s | errors |",
                  "|---|---|---|---|---|---|---|---|"]
        summary = []
        for rate, cell in results["length"].items():
            for name, row in cell["layouts"].items():
                p95 = [run["short_ttft_p95_ms"] for run in row["runs"]]
                lines.append(f"| {rate} | {name} | {_cell(row['short_ttft_p50_ms'], '.0f')} | "
                             f"{_cell(row['short_ttft_p95_ms'], '.0f')}{_range(p95, '.0f')} | "
                             f"{_cell(row['long_ttft_p50_ms'], '.0f')} | {_cell(row['long_ttft_p95_ms'], '.0f')} | "
                             f"{row['output_tok_per_s']:.0f} | {row['errors']} |")
            ratios = _present(cell["ratios"])
            mixed, split = cell["layouts"].values()
            some = f", {len(ratios)} of {len(cell['ratios'])} passes" if len(ratios) < len(cell["ratios"]) else ""
            paired = (f"**{statistics.median(ratios):.2f}x** better with the split (passes' paired ratios "
                      f"{min(ratios):.2f}-{max(ratios):.2f}{some})" if ratios
                      else "not measured (no short answers in a layout)")
            summary.append(f"- {rate}/s: short-answer TTFT p95 {paired}; throughput ratio "
                           f"{split['output_tok_per_s'] / mixed['output_tok_per_s']:.2f}.")
        lines += ["", *summary, ""]
    if "overload" in results:
        over = results["overload"]
        lines += [f"**Overload** (1 engine; capacity {over['capacity_req_per_s']:.1f} req/s measured at "
                  f"{over['max_in_flight']} in flight; pool max_in_flight {over['max_in_flight']}, queue_size "
                  f"{over['queue_size']}; 80-word prompts, 32 output tokens; {meta['overload_seconds']} s of Poisson "
                  f"arrivals; {meta['repeats']} passes, medians):", "",
                  "| sent | offered (req/s) | admitted | shed | admitted TTFT p50 (ms) | admitted TTFT p99 (ms), "
                  "median (range) | shed answer p50 / p99 (ms), median (range) | slowest shed answer, any pass (ms) |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, row in over["cases"].items():
            p99 = [run["ttft_p99_ms"] for run in row["runs"]]
            lines.append(f"| {name} | {row['rate']:.1f} | {row['admitted']:.0f} | {row['shed']:.0f} | "
                         f"{_cell(row['ttft_p50_ms'], '.0f')} | "
                         f"{_cell(row['ttft_p99_ms'], '.0f')}{_range(p99, '.0f')} | "
                         f"{_shed_cells(row['runs'])} |")
        ratios = _present(over["ratios"])
        if ratios:
            lines += ["", f"Admitted TTFT p99 at 3x: **{statistics.median(ratios):.2f}x** the 0.3x run's (passes' "
                      f"paired ratios {min(ratios):.2f}-{max(ratios):.2f})."]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [name for name in ("affinity", "length", "overload") if name in results]
    figure, panels = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4.8), squeeze=False)
    axes = dict(zip(shown, panels[0], strict=True))
    if "affinity" in results:
        axis = axes["affinity"]
        rows = results["affinity"]
        medians = [r["hit_rate"] * 100 for r in rows.values()]
        hits = [[run["hit_rate"] * 100 for run in r["runs"]] for r in rows.values()]
        ranges = [[m - min(h) for m, h in zip(medians, hits, strict=True)],
                  [max(h) - m for m, h in zip(medians, hits, strict=True)]]
        colors = {"single engine": "#8c8c8c", "round-robin": "#d9a441", "prefixgate": "#2b7bb9",
                  "prefixgate, two processes": "#2b7bb9", "prefixgate, warm memory off": "#6baed6",
                  "prefixgate, bare ring": "#c6dbef", "prefixgate, KV events": "#31a354",
                  "prefixgate, KV events, four processes": "#74c476",
                  "prefixgate, KV events, four processes, shared load": "#bae4b3",
                  "prefixgate, KV events, held_bound 2": "#006d2c"}
        labels = [name.replace(", ", ",\n").replace(" memory", "\nmemory") for name in rows]
        axis.bar(labels, medians, yerr=ranges, capsize=4, color=[colors.get(name, "#8c8c8c") for name in rows])
        axis.tick_params(axis="x", labelsize=7)
        axis.set_ylabel("engine prefix-cache hit rate (%)")
        axis.set_title("Prefix affinity")
    if "length" in results:
        axis = axes["length"]
        cells = results["length"]
        rates = [float(rate) for rate in cells]
        for name, color in (("one pool of two engines", "#8c8c8c"), ("short pool + long pool", "#2b7bb9")):
            shown_at = [(rate, cell) for rate, cell in zip(rates, cells.values(), strict=True)
                        if cell["layouts"][name]["short_ttft_p95_ms"] is not None]  # a pass with no short answer: none
            p95 = [_present(run["short_ttft_p95_ms"] for run in cell["layouts"][name]["runs"]) for _, cell in shown_at]
            medians = [cell["layouts"][name]["short_ttft_p95_ms"] for _, cell in shown_at]
            axis.errorbar([rate for rate, _ in shown_at], medians,
                          yerr=[[m - min(v) for m, v in zip(medians, p95, strict=True)],
                                [max(v) - m for m, v in zip(medians, p95, strict=True)]],
                          marker="o", capsize=4, color=color, label=name)
        axis.set_yscale("log")
        axis.set_xlabel("arrivals per second")
        axis.set_ylabel("short-answer TTFT p95 (ms, log)")
        axis.set_title("Length routing")
        axis.legend()
    if "overload" in results:
        axis = axes["overload"]
        rows = {name: r for name, r in results["overload"]["cases"].items() if r["ttft_p99_ms"] is not None}
        medians = [r["ttft_p99_ms"] for r in rows.values()]
        p99 = [_present(run["ttft_p99_ms"] for run in r["runs"]) for r in rows.values()]
        axis.bar(list(rows), medians, color=["#8c8c8c" if name.startswith("direct") else "#2b7bb9" for name in rows],
                 capsize=4,
                 yerr=[[m - min(v) for m, v in zip(medians, p99, strict=True)],
                       [max(v) - m for m, v in zip(medians, p99, strict=True)]])
        axis.set_yscale("log")
        axis.set_ylabel("admitted TTFT p99 (ms, log)")
        axis.set_title("Overload")
    for axis in axes.values():
        axis.tick_params(axis="x", labelsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def engine_args(args: argparse.Namespace) -> list[str]:
    extra = ["--max-num-seqs", str(args.max_num_seqs)]
    if args.kv_blocks:  # a KV cache smaller than the prompts' working set, as on a busy GPU
        extra += ["--num-gpu-blocks-override", str(args.kv_blocks)]
    if args.kv_events:  # each engine's own sockets; the gateway finds them at GET /kv_event_sources
        events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{free_port()}",
                  "replay_endpoint": f"tcp://*:{free_port()}", "topic": "kv"}
        extra += ["--kv-events-config", json.dumps(events)]
    return extra


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="affinity,length,overload")
    parser.add_argument("--engines", type=int, default=4, help="for affinity; an even count keeps cores evenly shared")
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--apps", type=int, default=6)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--prompt-words", type=int, default=400)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3,
                        help="passes of each case (medians reported)")
    parser.add_argument("--budget", type=float, default=0,
                        help="affinity: seconds for all passes; a pass that would not fit is not started (0: none)")
    parser.add_argument("--home-slack", type=int, default=1, help="the prefixgate pool's home_slack (default 1)")
    parser.add_argument("--length-rate", default="5", help="arrivals per second; a comma list sweeps")
    parser.add_argument("--length-seconds", type=float, default=30.0)
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--queue-size", type=int, default=0)
    parser.add_argument("--overload-seconds", type=float, default=20.0)
    parser.add_argument("--max-num-seqs", type=int, default=256,
                        help="engine batch slots (vLLM's default 256; a GPU's KV memory often allows fewer)")
    parser.add_argument("--kv-blocks", type=int, default=0, help="KV cache blocks per engine (0: 1 GiB's worth)")
    parser.add_argument("--kv-events", action="store_true",
                        help="engines publish KV events; adds the cases of prefixgate routing by them")
    parser.add_argument("--cases", help="affinity: only these cases (a ';' list; single engine is always run)")
    parser.add_argument("--engine-urls", help="affinity: the origins of engines started elsewhere (a comma list, "
                                              "e.g. by a GPU script, with prefix caching and dev-mode cache reset); "
                                              "none are started here")
    parser.add_argument("--model", default=MODEL, help="the served model name the requests ask for")
    parser.add_argument("--tokenizer", help="with --engine-urls: the engines' model folder (for the KV-event cases)")
    parser.add_argument("--kv-endpoints", help="each engine's KV-event socket (a comma list, engine order), for "
                                               "engines without GET /kv_event_sources")
    parser.add_argument("--where", help="the caption's machine and engine (default: detected at run time)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--name", default="routing", help="docs block and file stem")
    parser.add_argument("--render", metavar="JSON", help="only write the tables and plot again from a result file")
    args = parser.parse_args()
    if args.render:  # e.g. after a run whose plot could not be drawn
        saved = json.loads(Path(args.render).read_text())
        publish(Path(args.out), Path(args.render).stem, saved["meta"], saved["results"],
                markdown(saved["results"], saved["meta"]), "routing", plot)
        return
    only = set(args.only.split(","))
    workdir = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    cores = sorted(os.sched_getaffinity(0))
    if args.engine_urls:
        origins = args.engine_urls.split(",")
        warm_up(origins, args.model)
        results = {"affinity": run_affinity(origins, args.tokenizer, workdir, args)}
        publish_run(args, results, cores, len(origins))
        return
    count = args.engines if "affinity" in only else (2 if "length" in only else 1)
    engines = [start_engine(MODEL, workdir, core=cores[(-1 - i) % len(cores)], name=f"engine{i}",
                            extra_args=engine_args(args)) for i in range(count)]
    results = {}
    try:
        for engine in engines:
            engine.wait_ready(300)
        warm_up([e.origin for e in engines], MODEL)
        if "affinity" in only:
            results["affinity"] = run_affinity([e.origin for e in engines], engines[0].model_dir, workdir, args)
        if "length" in only:
            results["length"] = run_length(engines, workdir, args)
        if "overload" in only:
            results["overload"] = run_overload(engines[0], workdir, args)
    finally:
        for engine in engines:
            engine.stop()
    publish_run(args, results, cores, count)


def warm_up(origins: list[str], model: str) -> None:
    """Four requests per engine before any pass, so one-off costs (first kernels, first batches) fall outside."""
    warm = [({**overload_request(random.Random(i))[0], "model": model}, "warm", {}) for i in range(4 * len(origins))]
    uvloop.run(closed_loop(origins, warm, len(origins)))


def publish_run(args: argparse.Namespace, results: dict[str, Any], cores: list[int], engines: int) -> None:
    where = args.where or f"{machine.machine()}, {machine.vllm_version()}"
    meta = {"date": datetime.now().strftime("%Y-%m-%d"), "where": where, "cores": len(cores),
            "engines": engines, "command": command_line("routing.py", sys.argv[1:]),
            **{k: v for k, v in vars(args).items() if k not in ("only", "out", "where", "engines", "render")}}
    table = markdown(results, meta)
    print(table)
    publish(Path(args.out), args.name, meta, results, table, "routing", plot)


if __name__ == "__main__":
    main()
