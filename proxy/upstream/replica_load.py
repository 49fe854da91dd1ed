"""Polling each replica's own /metrics: the load other senders put on it, which the replica choice
counts, and the per-replica engine figures prefixgate's /metrics shows (``parse_engine_metrics``
says why). One task per replica, so a slow engine delays only its own reading.

Readings are taken on the wall clock's multiples of the interval (``poll_replica``), so gateway
processes that share engines read each engine at the same instants: their views of the load differ
by what each sent since the reading, not also by up to an interval's drift between readings, and
with ``kv_events.shared_load`` they count the same loads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from policies.routing.engine_load import EngineSample, foreign_load, hit_rate, lasting_load, parse_engine_metrics
from proxy.transports.base import UpstreamError

if TYPE_CHECKING:
    from proxy.config.upstream import EngineMetrics
    from proxy.upstream.replica import Replica

log = logging.getLogger("prefixgate")

OTHERS_MEMORY = 10  # readings for which a replica counts as shared after other senders were last seen there
NOT_VLLM_WAIT = 60.0  # seconds before asking again an upstream whose /metrics is not vLLM's


@dataclass(frozen=True, slots=True)
class ReplicaReading:
    """The latest reading of a replica's engine metrics."""

    sample: EngineSample
    hit_rate: float | None  # prefix-cache hits over queries in the last interval that had queries
    seen_others: int  # this reading's others' load, before lasting_load


async def read_replica(replica: Replica, settings: EngineMetrics) -> bool | None:
    """One reading into ``replica.reading`` and its others' load. True: read; False: no answer (try
    again next interval); None: it answered, but not with vLLM's metrics."""
    in_flight, taken = replica.in_flight, replica.taken
    try:
        status, body = await replica.transport.get(replica.origin + settings.path, settings.timeout)
    except UpstreamError:
        replica.reading_ok = False
        return False
    sample = parse_engine_metrics(body) if status == 200 else None
    if sample is None:
        replica.reading_ok = False
        return None if status in (200, 404) else False
    previous = replica.reading
    now = replica.clock()
    # Own requests: those in flight when the reading began and all sent while it was under way (some
    # may have ended meanwhile), so a request sent during the reading is never read as another's.
    seen = foreign_load(sample, max(in_flight + replica.taken - taken, replica.in_flight))
    rate = hit_rate(previous.sample if previous else None, sample)
    if rate is None and previous is not None:
        rate = previous.hit_rate  # an idle interval: keep the last rate rather than none
    replica.reading = ReplicaReading(sample, rate, seen)
    replica.reading_ok = True
    replica.others = lasting_load(previous.seen_others if previous else None, seen)
    if replica.others:  # a sender beside this process: remembered a while, as its load comes and goes
        replica.others_seen_until = now + OTHERS_MEMORY * settings.interval
    replica.others_until = now + 3 * settings.interval
    return True


def until_next_reading(wall_now: float, interval: float) -> float:
    """Seconds to the wall clock's next multiple of ``interval``: every process that shares the engines
    (their clocks kept in step by NTP) reads them at the same instants."""
    return interval - wall_now % interval


async def poll_replica(replica: Replica, settings: EngineMetrics, wall: Callable[[], float] = time.time,
                       sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Read ``replica``'s engine at once, then on each multiple of the interval on the ``wall`` clock,
    until cancelled."""
    warned = False
    while True:
        read = await read_replica(replica, settings)
        if read is None and not warned:
            log.info("replica %s of pool '%s' serves no vLLM metrics at %s; asking again every %.0f s",
                     replica.base_url, replica.pool, settings.path, NOT_VLLM_WAIT)
            warned = True
        await sleep(NOT_VLLM_WAIT if read is None else until_next_reading(wall(), settings.interval))


def load_polls(replicas: Iterable[Replica], settings: EngineMetrics) -> list[asyncio.Task[None]]:
    """One polling task per replica, where ``engine_metrics`` asks for readings."""
    loop = asyncio.get_running_loop()
    return [loop.create_task(poll_replica(replica, settings), name=f"engine metrics {replica.base_url}")
            for replica in replicas if settings.interval > 0]
