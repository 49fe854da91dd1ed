"""One upstream replica: its transport, its health, and the load the replica choice counts.

``Replica`` owns its counters: a request ``take``s it and ``release``s it exactly once, whichever
of the relay, a retry or the end of the answer lets it go, so the choice never reads a count that
a slip elsewhere left wrong.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from policies.routing.health import HEALTHY, EjectionRules, HealthState, after_failure, after_success
from proxy.clock import Clock
from proxy.transports.base import Transport

if TYPE_CHECKING:
    from proxy.upstream.replica_load import ReplicaReading

log = logging.getLogger("prefixgate")


def origin_of(base_url: str) -> str:
    """http://host:8000/v1 -> http://host:8000 (where vLLM serves /health and /metrics)."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


class Replica:
    __slots__ = ("base_url", "clock", "health", "health_url", "in_flight", "origin", "others", "others_seen_until",
                 "others_until", "pool", "reading", "reading_ok", "rules", "taken", "transport")

    def __init__(self, base_url: str, transport: Transport, health_path: str, rules: EjectionRules,
                 pool: str, clock: Clock) -> None:
        self.base_url = base_url
        self.origin = origin_of(base_url)
        self.health_url = self.origin + health_path
        self.transport = transport
        self.clock = clock
        self.in_flight = 0  # this process's requests
        self.taken = 0  # ... and all it has sent, so a reading can tell which of the engine's are its own
        self.reading: ReplicaReading | None = None  # the latest reading of the engine's /metrics
        self.reading_ok = False  # the latest reading succeeded
        self.others = 0  # requests at the engine from other senders, as read ...
        self.others_until = 0.0  # ... and counted in the choice until then (on ``clock``)
        self.others_seen_until = 0.0  # other senders were at the engine lately (on ``clock``)
        self.health: HealthState = HEALTHY
        self.rules = rules
        self.pool = pool

    def take(self) -> None:
        """A request of this process goes to this replica: the load the replica choice counts. Every
        ``take`` has one ``release``, after any retry moved the request on or when its answer ends."""
        self.in_flight += 1
        self.taken += 1

    def release(self) -> None:
        self.in_flight -= 1

    def others_at(self, now: float) -> int:
        """Other senders' requests at this engine, while the reading that found them is fresh."""
        return self.others if now < self.others_until else 0

    def engine_count_at(self, now: float) -> int | None:
        """All senders' requests at this engine (running + waiting) as the latest reading found them,
        while it is fresh."""
        if self.reading is None or now >= self.others_until:
            return None
        return round(self.reading.sample.running + self.reading.sample.waiting)

    def succeeded(self) -> None:
        if self.health is not HEALTHY:
            if self.health.tripped:
                log.info("replica %s of pool '%s' is back", self.base_url, self.pool)
            self.health = after_success(self.health)

    def failed(self, *, at_once: bool = False) -> None:
        """A failed exchange (or, ``at_once``, a failed health check): may eject the replica."""
        before = self.health
        self.health = after_failure(before, self.clock(), self.rules, at_once=at_once)
        if self.health.ejected_until != before.ejected_until:
            log.warning("replica %s of pool '%s' ejected for %.0f s after %d failure(s) in a row",
                        self.base_url, self.pool, self.health.backoff, self.health.failures)

