"""Which replica of a pool gets the next request when the prompt does not decide it.

The healthy replica with the fewest requests in flight, ties broken by rotating from ``start`` so
equal replicas share load. Used by pools with ``balance: least_loaded`` and for embeddings;
prompts go by prefix (``bounded_choice``) by default.
"""

from __future__ import annotations

from collections.abc import Sequence


def least_loaded(in_flight: Sequence[int], healthy: Sequence[bool], start: int) -> int | None:
    """Index of the replica to use, or None when no replica is healthy."""
    count = len(in_flight)
    best: int | None = None
    for offset in range(count):
        index = (start + offset) % count
        if healthy[index] and (best is None or in_flight[index] < in_flight[best]):
            best = index
    return best
