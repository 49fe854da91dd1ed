"""Which replica of a pool gets the next request.

For now: the healthy replica with the fewest requests in flight, ties broken by rotating from
``start`` so equal replicas share load. Prefix-affine choice (consistent hashing with bounded
loads) replaces this in the routing work; the signature stays data in, index out.
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
