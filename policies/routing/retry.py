"""Whether a failed upstream exchange is tried once more on another replica.

Only failures that leave nothing half done qualify: the replica refused the connection, or answered
502/503 (an engine shedding load or restarting), and no byte has reached the client yet. A retry
budget keeps retries from multiplying an outage: retries under way may be at most ``budget`` of the
requests under way, with a floor of ``min_concurrent`` so a quiet pool can still retry (Envoy's retry
budget has the same shape).
"""

from __future__ import annotations

RETRYABLE_STATUSES = frozenset({502, 503})


def retryable(*, connect_failed: bool, status: int, attempt: int, attempts: int) -> bool:
    """A failure this request may retry: ``attempt`` counts the retries it made already."""
    return attempt < attempts and (connect_failed or status in RETRYABLE_STATUSES)


def retry_within_budget(retrying: int, in_flight: int, budget: float, min_concurrent: int) -> bool:
    """May one more retry start while ``retrying`` retries and ``in_flight`` requests are under way?"""
    return retrying < max(min_concurrent, int(budget * in_flight))
