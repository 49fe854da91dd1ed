"""Load metrics read from the pools rather than counted on the request path: requests in flight
and queued, replica health, and each replica's engine as last read from its own /metrics
(``poll_replica``).

One process: a collector reads the pools at scrape time, so the request path updates nothing.
Several uvicorn workers: each worker copies the same values into prometheus_client's multi-process
gauges once a second, where a scrape of any worker finds them all, combined per gauge as
``LoadGauge.mode`` says (in-flight requests add up; an ejection anywhere shows; engine readings are
the latest any worker wrote).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

REPLICA = ("pool", "replica")
# how several workers' values of a gauge combine (prometheus_client's multiprocess_mode)
MultiprocessMode = Literal["all", "liveall", "min", "livemin", "max", "livemax", "sum", "livesum", "mostrecent",
                           "livemostrecent"]


@dataclass(frozen=True, slots=True)
class LoadGauge:
    name: str
    help: str
    labels: tuple[str, ...] = REPLICA
    mode: MultiprocessMode = "livemostrecent"
    counter: bool = False  # exposed as a counter by one process (a count the engine keeps)


IN_FLIGHT = LoadGauge("prefixgate_replica_in_flight", "Requests in flight to each replica from this gateway "
                      "(all its workers).", mode="livesum")
HEALTHY = LoadGauge("prefixgate_replica_healthy", "1 while a replica takes requests, 0 while it is ejected "
                    "(by any worker).", mode="livemin")
QUEUED = LoadGauge("prefixgate_pool_queued", "Requests waiting for a slot in a pool's queue.", ("pool",), "livesum")
ENGINE_UP = LoadGauge("prefixgate_engine_up", "1 when the latest reading of a replica's engine metrics "
                      "succeeded.", mode="livemax")
OTHERS = LoadGauge("prefixgate_engine_others_requests", "Requests at a replica's engine that this process did "
                   "not send (running + waiting less its own in flight); the replica choice counts them. With "
                   "several workers, one series per worker (pid).", mode="liveall")
RUNNING = LoadGauge("prefixgate_engine_running", "Requests a replica's engine is running, as last read.")
WAITING = LoadGauge("prefixgate_engine_waiting", "Requests waiting in a replica's engine scheduler, as last read.")
KV_USAGE = LoadGauge("prefixgate_engine_kv_cache_usage", "Share (0-1) of a replica's KV-cache blocks in use, as "
                     "last read.")
HIT_RATE = LoadGauge("prefixgate_engine_prefix_cache_hit_rate", "A replica's prefix-cache hits over queries "
                     "(tokens) between the last two readings that saw queries.")
PREEMPTIONS = LoadGauge("prefixgate_engine_preemptions", "Requests a replica's engine preempted (out of KV "
                        "blocks), as last read.", counter=True)
SHORT_RECALL = LoadGauge("prefixgate_length_short_recall", "Share of a short pool's recent truly short answers "
                         "(the last 512) that prediction sent to it; absent until 64 are in. The lowest worker's.",
                         ("pool",), "livemin")
LENGTH_SPLIT = LoadGauge("prefixgate_length_split", "1 while a short pool takes only the answers predicted short, "
                         "0 while it and the long pool take requests as one (recall below min_recall).", ("pool",),
                         "livemin")
KV_BLOCKS = LoadGauge("prefixgate_kv_index_blocks", "Blocks a replica's engine holds by its KV events, as this "
                     "process's index has them (balance kv_events).", mode="liveall")
KV_LAG = LoadGauge("prefixgate_kv_event_lag_seconds", "Age of a replica's latest KV-event batch when it arrived.",
                   mode="livemax")
KV_BATCHES = LoadGauge("prefixgate_kv_event_batches", "KV-event batches received from a replica's engine.",
                       mode="liveall", counter=True)
KV_MISSED = LoadGauge("prefixgate_kv_event_batches_missed", "KV-event batches of a replica lost for good (not "
                      "replayed): its blocks were forgotten and learnt again.", mode="liveall", counter=True)
# What the pools report, read at scrape time: (gauge, label values, value) (``pool_load_samples``).
LoadSamples = Callable[[], Iterable[tuple[LoadGauge, list[str], float]]]
GAUGES = (IN_FLIGHT, HEALTHY, QUEUED, ENGINE_UP, OTHERS, RUNNING, WAITING, KV_USAGE, HIT_RATE, PREEMPTIONS,
          SHORT_RECALL, LENGTH_SPLIT, KV_BLOCKS, KV_LAG, KV_BATCHES, KV_MISSED)


class LoadCollector(Collector):
    """One process: the load values, read at scrape time."""

    def __init__(self) -> None:
        self.samples: LoadSamples | None = None  # set once the gateway has started

    def collect(self) -> Iterator[Metric]:
        families: dict[LoadGauge, CounterMetricFamily | GaugeMetricFamily] = {
            gauge: (CounterMetricFamily if gauge.counter else GaugeMetricFamily)(
                gauge.name, gauge.help, labels=list(gauge.labels))
            for gauge in GAUGES
        }
        if self.samples is not None:
            for gauge, labels, value in self.samples():
                families[gauge].add_metric(labels, value)
        yield from families.values()


class LoadGauges:
    """Several workers: the load values written to multi-process gauges, by ``publish`` once a
    ``interval`` and at every scrape this worker answers."""

    def __init__(self, interval: float = 1.0) -> None:
        self.samples: LoadSamples | None = None
        self.interval = interval
        self._gauges = {
            # The engine's own counter becomes a gauge here (the multi-process files keep no other kind
            # that one process may set), under the name the counter's samples have.
            gauge: Gauge(gauge.name + ("_total" if gauge.counter else ""), gauge.help, list(gauge.labels),
                         registry=None, multiprocess_mode=gauge.mode)
            for gauge in GAUGES
        }

    def publish(self) -> None:
        if self.samples is not None:
            for gauge, labels, value in self.samples():
                self._gauges[gauge].labels(*labels).set(value)

    async def publish_forever(self) -> None:
        while True:
            self.publish()
            await asyncio.sleep(self.interval)
