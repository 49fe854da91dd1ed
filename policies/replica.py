"""Which replica of a pool gets the next request, and why.

Prompts go by prefix (``bounded_choice``) by default; requests without a prefix key (pools with
``balance: least_loaded``, embeddings) to the healthy replica with the fewest requests in flight,
ties broken by rotating from ``start`` so equal replicas share load. The reasons are the
``reason`` label of ``prefixgate_replica_choices_total``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from policies.affinity import HashRing, bounded_choice

# single: the pool's one replica; home: the prefix's own; warm: another replica that served the prefix
# lately (less loaded than the home, or the home was over the bound or ejected); spilled: the home was
# over the bound or ejected and this replica had not served the prefix; least_loaded: no prefix key.
ReplicaReason = Literal["single", "home", "warm", "spilled", "least_loaded"]


def least_loaded(in_flight: Sequence[int], healthy: Sequence[bool], start: int) -> int | None:
    """Index of the replica to use, or None when no replica is healthy."""
    count = len(in_flight)
    best: int | None = None
    for offset in range(count):
        index = (start + offset) % count
        if healthy[index] and (best is None or in_flight[index] < in_flight[best]):
            best = index
    return best


def pick_replica(in_flight: Sequence[int], healthy: Sequence[bool], *, key: int | None, ring: HashRing,
                 bound: float, home_slack: int, warm: int, start: int) -> tuple[int, ReplicaReason] | None:
    """The replica's index and why: by prefix ``key`` under the load ``bound`` (``warm``: bit i set
    when replica i served the prefix lately), else the least loaded. None when none is healthy."""
    if key is None:
        index = least_loaded(in_flight, healthy, start)
        return None if index is None else (index, "least_loaded")
    index = bounded_choice(ring, key, in_flight, healthy, bound, home_slack, warm)
    if index is None:
        return None
    if index == ring.home(key):
        return index, "home"
    return index, "warm" if warm >> index & 1 else "spilled"
