"""TallyCounter and TallyHistogram: a scrape shows exactly what prometheus_client's own Counter and
Histogram would show for the same observations, so dashboards and alerts cannot tell them apart."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from proxy.observability.tallies import LOCAL_KINDS, SHARED_KINDS, MetricKinds

BUCKETS = (0, 0.5, 1, 2.5)
CREATED = re.compile(rb"^(\S+_created(?:\{[^}]*\})?) \S+$", re.MULTILINE)


def scrape(kinds: MetricKinds, observations: list[tuple[str, float]]) -> bytes:
    registry = CollectorRegistry(auto_describe=True)
    requests = kinds.counter("demo_requests", "Requests by route.", ["route"], registry=registry)
    sizes = kinds.histogram("demo_size", "Sizes by route.", ["route"], buckets=BUCKETS, registry=registry)
    kinds.counter("demo_failures", "Failures (no labels).", registry=registry).inc(3)
    kinds.counter("demo_unused", "A labelled family nobody observed.", ["kind"], registry=registry)
    for route, value in observations:
        requests.labels(route).inc()
        sizes.labels(route).observe(value)
    return CREATED.sub(rb"\1 <time>", generate_latest(registry))


OBSERVATIONS = [("chat", 0.0), ("chat", 0.5), ("chat", 0.50001), ("embed", 2.5), ("chat", 99.0), ("embed", -1.0),
                ("chat", 1.0)]


def test_the_scrape_is_prometheus_clients_own_byte_for_byte() -> None:
    tallied = scrape(LOCAL_KINDS, OBSERVATIONS)
    assert tallied == scrape(SHARED_KINDS, OBSERVATIONS)
    # bounds are inclusive (le), past the last bound is +Inf only, and the counts are cumulative
    assert b'demo_size_bucket{le="0.5",route="chat"} 2.0' in tallied
    assert b'demo_size_bucket{le="2.5",route="chat"} 4.0' in tallied
    assert b'demo_size_bucket{le="+Inf",route="chat"} 5.0' in tallied
    assert b'demo_size_bucket{le="0.0",route="embed"} 1.0' in tallied
    assert b'demo_requests_total{route="chat"} 5.0' in tallied
    assert b"demo_failures_total 3.0" in tallied


def test_created_series_follow_prometheus_clients_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert b"demo_requests_created{" in scrape(LOCAL_KINDS, OBSERVATIONS)
    monkeypatch.setenv("PROMETHEUS_DISABLE_CREATED_SERIES", "true")
    assert b"_created" not in scrape(LOCAL_KINDS, OBSERVATIONS)


def test_a_counter_refuses_to_go_down_and_a_family_its_wrong_labels() -> None:
    registry = CollectorRegistry()
    requests = LOCAL_KINDS.counter("demo_requests", "Requests.", ["route", "status"], registry=registry)
    with pytest.raises(ValueError, match="only go up"):
        requests.labels("chat", "200").inc(-1)
    with pytest.raises(ValueError, match="takes labels"):
        requests.labels("chat")


def test_buckets_out_of_order_are_refused_like_prometheus_client_refuses_them() -> None:
    for kinds in (LOCAL_KINDS, SHARED_KINDS):
        with pytest.raises(ValueError, match=r"(?i)sorted order"):
            kinds.histogram("demo_size", "Sizes.", buckets=(1, 0.5), registry=CollectorRegistry())


def test_a_name_taken_twice_in_one_registry_is_refused() -> None:
    registry = CollectorRegistry(auto_describe=True)
    LOCAL_KINDS.counter("demo_requests", "Requests.", registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Counter("demo_requests", "Requests again.", registry=registry)
    Histogram("demo_size", "Sizes.", registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        LOCAL_KINDS.histogram("demo_size", "Sizes again.", buckets=BUCKETS, registry=registry)
