"""Client connection metrics: how many are open, and how many the ``ConnectionGuard`` closed or refused,
by reason. Counted per connection, not per request; with several workers the gauge adds up all
workers' open connections."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from proxy.connections.guard import CloseReason
from proxy.observability.metric_families import spelled_out


class ConnectionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._open = Gauge("prefixgate_connections_open", "Client connections open (all workers).",
                           registry=registry, multiprocess_mode="livesum")
        closes = Counter(
            "prefixgate_connections_closed", "Client connections the gateway closed or refused, by reason ("
            f"{spelled_out(CloseReason)}).", ["reason"], registry=registry)
        self._closes = {reason: closes.labels(reason) for reason in CloseReason}

    def opened(self) -> None:
        self._open.inc()

    def closed(self) -> None:
        self._open.dec()

    def dropped(self, reason: CloseReason) -> None:
        self._closes[reason].inc()
