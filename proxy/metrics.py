"""Prometheus metrics, one registry per app (no module globals), label children cached."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "prefixgate_requests", "Requests answered, by route and HTTP status.",
            ["route", "status"], registry=self.registry,
        )
        self._duration = Histogram(
            "prefixgate_request_duration_seconds",
            "Time from request arrival to the last byte sent, by route and status.",
            ["route", "status"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self._ttft = Histogram(
            "prefixgate_time_to_first_token_seconds",
            "Time from request arrival to the first streamed chunk relayed to the client.",
            ["route"], buckets=TTFT_BUCKETS, registry=self.registry,
        )
        self._upstream_errors = Counter(
            "prefixgate_upstream_errors", "Failed upstream exchanges, by pool and kind.",
            ["pool", "kind"], registry=self.registry,
        )
        self._children: dict[tuple[str, ...], tuple[Counter, Histogram]] = {}
        self._ttft_children: dict[str, Histogram] = {}

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        key = (route, str(status))
        children = self._children.get(key)
        if children is None:
            children = (self._requests.labels(*key), self._duration.labels(*key))
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def observe_ttft(self, route: str, seconds: float) -> None:
        child = self._ttft_children.get(route)
        if child is None:
            child = self._ttft_children[route] = self._ttft.labels(route)
        child.observe(seconds)

    def upstream_error(self, pool: str, kind: str) -> None:
        self._upstream_errors.labels(pool, kind).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
