"""When a replica is left out of the choice: ejection after consecutive failures, with back-off.

A replica that fails ``eject_after`` exchanges in a row (connection refused or reset, a 5xx, a
stream cut short; the caller leaves timeouts out, as they are load), or fails an active health
check, is ejected for ``backoff`` seconds; each ejection that follows without a success in between
doubles that, up to ``max_backoff``. When the time is up the replica is half-open: it gets one
request at a time (it is usable only with nothing in flight) until a success closes it again or a
failure ejects it at once. Pure state transitions: the caller keeps the state per replica and
passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EjectionRules:
    eject_after: int = 3
    backoff: float = 1.0
    max_backoff: float = 30.0


@dataclass(frozen=True, slots=True)
class HealthState:
    failures: int = 0  # consecutive, since the last success
    ejected_until: float = 0.0  # clock reading; 0: never ejected
    backoff: float = 0.0  # the length of the last ejection; 0: none since the last success

    @property
    def tripped(self) -> bool:
        """Ejected now or half-open: failed enough in a row that the next failure ejects again."""
        return self.ejected_until > 0.0


def after_success(state: HealthState) -> HealthState:
    """Any success closes the replica again and forgets its failures and back-off."""
    return HEALTHY


def after_failure(state: HealthState, now: float, rules: EjectionRules, *, at_once: bool = False) -> HealthState:
    """A failed exchange; ``at_once`` for a failed health check, which ejects without waiting for more."""
    failures = state.failures + 1
    if not at_once and not state.tripped and failures < rules.eject_after:
        return HealthState(failures, 0.0, 0.0)
    backoff = min(rules.max_backoff, state.backoff * 2 if state.backoff else rules.backoff)
    return HealthState(failures, now + backoff, backoff)


def usable(state: HealthState, now: float, in_flight: int) -> bool:
    """May this replica take a request now? Half-open replicas take one at a time."""
    if not state.tripped:
        return True
    return now >= state.ejected_until and in_flight == 0


HEALTHY = HealthState()
