"""Open-loop load: requests arrive on a seeded Poisson schedule, whatever the answers do.

Why not wrk for latency: wrk is closed-loop (each connection sends its next request the moment
the last answer ends). With an upstream whose answers all take the same time, its 64 connections
start together and stay in lockstep for the whole run, so the gateway sees bursts of 64 requests
within a millisecond and the last one waits for the CPU work of the 63 before it. Real users
arrive independently. Here arrivals are exponential gaps at ``rate`` per second (mean concurrency
= rate x answer time, Little's law), the same seeded schedule is replayed direct and through
prefixgate, and latency counts from the scheduled arrival, so a late client never hides a delay.

    python tests/bench/open_loop.py URL BODY_JSON --rate R --seconds S [--warmup W] [--seed N]

Prints one line, ``RESULT {...}``: sent (warm-up included), requests and errors counted after the
warm-up, latency and first-byte percentiles in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import aiohttp
import uvloop


def schedule(rate: float, seconds: float, seed: int) -> list[float]:
    """Arrival offsets in seconds: a Poisson process of ``rate`` per second over ``seconds``."""
    rng = random.Random(seed)
    offsets, now = [], 0.0
    while True:
        now += rng.expovariate(rate)
        if now >= seconds:
            return offsets
        offsets.append(now)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _one(session: aiohttp.ClientSession, url: str, payload: bytes, due: float, stream: bool) -> tuple:
    first = None
    try:
        async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as response:
            if stream:
                async for _ in response.content.iter_any():
                    if first is None:
                        first = time.perf_counter() - due
            else:
                await response.read()
                first = time.perf_counter() - due
            ok = response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        ok = False
    return ok, time.perf_counter() - due, first


async def run(url: str, body: dict, rate: float, seconds: float, warmup: float, seed: int) -> dict:
    payload = json.dumps(body).encode()
    stream = bool(body.get("stream"))
    offsets = schedule(rate, warmup + seconds, seed)
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=30)
    session = aiohttp.ClientSession(connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",))
    async with session:
        start = time.perf_counter() + 0.05
        tasks = []
        for offset in offsets:
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(_one(session, url, payload, due, stream))
            tasks.append((offset >= warmup, task))
        results = [(measured, await task) for measured, task in tasks]
    kept = [result for measured, result in results if measured]
    latencies = [total * 1000 for ok, total, _ in kept if ok]
    firsts = [first * 1000 for ok, _, first in kept if ok and first is not None]
    return {
        "sent": len(results), "requests": len(latencies), "errors": sum(1 for ok, _, _ in kept if not ok),
        "seconds": seconds,
        "p50": percentile(latencies, 0.50), "p99": percentile(latencies, 0.99),
        "first_p50": percentile(firsts, 0.50), "first_p99": percentile(firsts, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("body", help="the request body, as JSON")
    parser.add_argument("--rate", type=float, required=True, help="mean arrivals per second")
    parser.add_argument("--seconds", type=float, required=True, help="measured span")
    parser.add_argument("--warmup", type=float, default=2.0, help="arrivals before this are not counted")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = uvloop.run(run(args.url, json.loads(args.body), args.rate, args.seconds, args.warmup, args.seed))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
