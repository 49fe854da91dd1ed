"""Counters and histograms kept as plain numbers and read by Prometheus at scrape time.

prometheus_client's ``Counter`` and ``Histogram`` take a lock for every value they change and scan the
buckets one by one on every observation: a dozen observations per request cost about a seventh of the
gateway's CPU per request. A single-process gateway changes its metrics only from its event loop, so
they need no lock. ``TallyCounter`` and ``TallyHistogram`` keep one plain number per label set (a
histogram finds its bucket by bisection) and are prometheus_client custom collectors, the library's
documented way to export numbers kept elsewhere: at scrape time they emit the same families and samples
as prometheus_client's own (``_total``, ``_bucket``, ``_count``, ``_sum``, ``_created``).

With several workers the families stay prometheus_client's own, whose memory-mapped values
``MultiProcessCollector`` adds up over workers; ``LOCAL_KINDS`` and ``SHARED_KINDS`` name the two sets.
Only the event loop may touch a tally.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Generic, NamedTuple, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import INF, floatToGoString


def _created_series_wanted() -> bool:
    """prometheus_client's own switch for the ``_created`` samples, read the way it reads it."""
    return os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t")


class CounterTally:
    """One label set's count."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only go up")
        self.value += amount


class HistogramTally:
    """One label set's observations: a count per bucket (not cumulative) and their sum."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bucket whose bound is >= amount
        self.sum += amount


_Tally = TypeVar("_Tally", CounterTally, HistogramTally)


class _Tallies(Generic[_Tally]):
    """A family's label sets, made on first use like prometheus_client's ``labels``; a family without
    labels has its one tally from the start, and ``inc``/``observe`` go to it."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry | None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _Tally] = {}
        if not self.labelnames:
            self._children[()] = self._new()
        if registry is not None:
            registry.register(self)

    def _new(self) -> _Tally:
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:  # what the registry reads at scrape time
        raise NotImplementedError

    def labels(self, *values: str) -> _Tally:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self._children[values] = self._new()
        return child


class TallyCounter(_Tallies[CounterTally]):
    """A counter family with ``prometheus_client.Counter``'s constructor, ``labels`` and ``inc``."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: CollectorRegistry | None) -> None:
        super().__init__(name, documentation, labelnames, registry)

    def _new(self) -> CounterTally:
        return CounterTally()

    def inc(self, amount: float = 1) -> None:
        self.labels().inc(amount)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _created_series_wanted()
        for values, child in self._children.items():
            family.add_metric(values, child.value, created=child.created if created else None)
        yield family


class TallyHistogram(_Tallies[HistogramTally]):
    """A histogram family with ``prometheus_client.Histogram``'s constructor, ``labels`` and ``observe``."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: CollectorRegistry | None, buckets: Sequence[float]) -> None:
        bounds = [float(bound) for bound in buckets]
        if bounds != sorted(bounds):
            raise ValueError("buckets not in sorted order")
        if bounds[-1] != INF:
            bounds.append(INF)
        self.bounds = bounds
        self._labels = [floatToGoString(bound) for bound in bounds]
        super().__init__(name, documentation, labelnames, registry)

    def _new(self) -> HistogramTally:
        return HistogramTally(self.bounds)

    def observe(self, amount: float) -> None:
        self.labels().observe(amount)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _created_series_wanted()
        for values, child in self._children.items():
            running, buckets = 0, []
            for label, count in zip(self._labels, child.counts, strict=True):
                running += count
                buckets.append((label, running))
            family.add_metric(values, buckets, child.sum)
            if created:  # HistogramMetricFamily has no created argument; Histogram's own exposes it
                family.add_sample(self.name + "_created", dict(zip(self.labelnames, values, strict=True)),
                                  child.created)
        yield family


CounterFamily = Counter | TallyCounter
HistogramFamily = Histogram | TallyHistogram
CounterChild = Counter | CounterTally  # what a family's labels(...) gives
HistogramChild = Histogram | HistogramTally


class MetricKinds(NamedTuple):
    """The counter and histogram classes a ``Metrics`` registers its families with."""

    counter: type[Counter] | type[TallyCounter]
    histogram: type[Histogram] | type[TallyHistogram]


LOCAL_KINDS = MetricKinds(TallyCounter, TallyHistogram)  # one process: plain numbers
SHARED_KINDS = MetricKinds(Counter, Histogram)  # several workers: memory-mapped, summed at scrape
