"""Which replica of a pool gets the next request, and why.

Prompts go by prefix (``bounded_choice``) by default, or, where the engines report the blocks they
hold, first to the replica holding the longest part of the prompt (``held_choice``); requests without a
prefix key (pools with
``balance: least_loaded``, embeddings) to the healthy replica with the fewest requests in flight,
ties broken by rotating from ``start`` so equal replicas share load. The reasons are the
``reason`` label of ``prefixgate_replica_choices_total``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from policies.affinity import HashRing, bounded_choice

# single: the pool's one replica; held: the replica that holds the longest part of the prompt, by its
# engine's KV events; home: the prefix's own on the ring; warm: another replica that served the prefix
# lately (less loaded than the home, or the home was over the bound or ejected); spilled: the home was
# over the bound or ejected and this replica had not served the prefix; least_loaded: no prefix key.
ReplicaReason = Literal["single", "held", "home", "warm", "spilled", "least_loaded"]


def least_loaded(in_flight: Sequence[int], healthy: Sequence[bool], start: int) -> int | None:
    """Index of the replica to use, or None when no replica is healthy."""
    count = len(in_flight)
    best: int | None = None
    for offset in range(count):
        index = (start + offset) % count
        if healthy[index] and (best is None or in_flight[index] < in_flight[best]):
            best = index
    return best


def held_choice(ring: HashRing, key: int, held: Sequence[int], in_flight: Sequence[int], healthy: Sequence[bool],
                bound: float, slack: int = 0) -> int | None:
    """Of the healthy replicas within the load bound (``bounded_choice``'s), the one holding the most
    of the prompt's leading blocks (``held[i]``), ties to the less loaded, then to the first on the
    key's ring walk, so gateways that see the same events and loads choose alike. Failing those, the
    replica holding the most may take it past the bound by ``slack`` requests, as a ring's home may:
    elsewhere the prompt would be prefilled cold. None when no replica within reach holds any block:
    the ring decides then."""
    live = [index for index in range(ring.size) if healthy[index]]
    if not live:
        return None
    capacity = math.ceil(bound * (sum(in_flight[index] for index in live) + 1) / len(live))
    best: int | None = None
    most: int | None = None  # the replica holding the most, whatever its load
    for index in ring.walk(key):
        if not healthy[index] or held[index] <= 0:
            continue
        rank = (held[index], -in_flight[index])
        if most is None or rank > (held[most], -in_flight[most]):
            most = index
        if in_flight[index] < capacity and (best is None or rank > (held[best], -in_flight[best])):
            best = index
    if best is None and most is not None and in_flight[most] < capacity + slack:
        return most
    return best


def pick_replica(in_flight: Sequence[int], healthy: Sequence[bool], *, key: int | None, ring: HashRing,
                 bound: float, home_slack: int, warm: int, start: int,
                 held: Sequence[int] | None = None) -> tuple[int, ReplicaReason] | None:
    """The replica's index and why: the one holding most of the prompt (``held``, from the engines'
    KV events), else by prefix ``key`` under the load ``bound`` (``warm``: bit i set when replica i
    served the prefix lately), else the least loaded. None when none is healthy."""
    if key is None:
        index = least_loaded(in_flight, healthy, start)
        return None if index is None else (index, "least_loaded")
    if held is not None:
        index = held_choice(ring, key, held, in_flight, healthy, bound, home_slack)
        if index is not None:
            return index, "held"
    index = bounded_choice(ring, key, in_flight, healthy, bound, home_slack, warm)
    if index is None:
        return None
    if index == ring.home(key):
        return index, "home"
    return index, "warm" if warm >> index & 1 else "spilled"
