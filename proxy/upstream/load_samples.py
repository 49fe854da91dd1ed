"""The pools' load as the metrics read it at scrape time (``pool_load_samples``): each pool says what it has
(``Pool.load_samples``: its queue, a short pool's recall; a replica pool's replicas, engines and KV-event feeds
too, ``replica_samples``); ``LoadCollector`` and ``LoadGauges`` only name and publish the values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from proxy.observability.load_metrics import (
    ENGINE_UP,
    HEALTHY,
    HIT_RATE,
    IN_FLIGHT,
    KV_BATCHES,
    KV_BLOCKS,
    KV_LAG,
    KV_MISSED,
    KV_USAGE,
    OTHERS,
    PREEMPTIONS,
    RUNNING,
    WAITING,
    LoadGauge,
)

if TYPE_CHECKING:
    from proxy.upstream.pools import Upstreams
    from proxy.upstream.replica_pool import ReplicaPool


def pool_load_samples(upstreams: Upstreams) -> Iterator[tuple[LoadGauge, list[str], float]]:
    """Every load value of the gateway's pools, as (gauge, label values, value)."""
    now = upstreams.clock()
    for pool in upstreams.all_pools():
        yield from pool.load_samples(now)


def replica_samples(pool: ReplicaPool, now: float) -> Iterator[tuple[LoadGauge, list[str], float]]:
    """Each replica's requests in flight, health and engine reading; with KV events, each feed's state."""
    for replica in pool.replicas:
        key = [pool.name, replica.base_url]
        yield IN_FLIGHT, key, replica.in_flight
        yield HEALTHY, key, 0 if replica.health.tripped else 1
        if pool.engine_metrics.interval > 0:
            yield ENGINE_UP, key, 1 if replica.reading_ok else 0
        reading = replica.reading
        if reading is None:
            continue
        yield OTHERS, key, replica.others_at(now)
        yield RUNNING, key, reading.sample.running
        yield WAITING, key, reading.sample.waiting
        yield KV_USAGE, key, reading.sample.kv_usage
        if reading.hit_rate is not None:
            yield HIT_RATE, key, reading.hit_rate
        yield PREEMPTIONS, key, reading.sample.preemptions
    if pool.kv is not None:
        for replica, feed in zip(pool.replicas, pool.kv.feeds, strict=True):
            key = [pool.name, replica.base_url]
            yield KV_BLOCKS, key, pool.kv.index.size(feed.replica)
            yield KV_LAG, key, feed.state.lag_s
            yield KV_BATCHES, key, feed.state.batches
            yield KV_MISSED, key, feed.state.missed
