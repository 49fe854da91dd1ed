"""Which replica of a pool gets the next request, and why.

Prompts go by prefix (``bounded_choice``) by default, or, where the engines report the blocks they
hold, first to the replica holding the longest part of the prompt (``held_choice``); requests without a
prefix key (pools with
``balance: least_loaded``, embeddings) to the healthy replica with the fewest requests in flight,
ties broken by rotating from ``start`` so equal replicas share load. The reasons, with what each
means, are ``ReplicaReason``.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.routing.affinity import HashRing, bounded_choice, capacity
from policies.vocabulary import Vocabulary


class ReplicaReason(Vocabulary):
    """Why a replica was chosen: the ``reason`` of ``pick_replica`` and of the pool's choice, the ``reason`` label of
    prefixgate_replica_choices_total and of /admin/route's answer. The metric's help, the OpenAPI document and
    docs/configuration.md are written from it."""

    SINGLE = "single", "the pool's only replica"
    HELD = "held", "its engine holds the longest part of the prompt, by the engines' KV events (balance kv_events)"
    PLACED = "placed", ("a prompt no engine holds, on the second of its two ring replicas, whose engine holds fewer "
                        "blocks or, holding about as many, has fewer requests in flight (balance kv_events)")
    REHOMED = "rehomed", ("held by one engine only, while the emptier of the prompt's two ring replicas holds under "
                          "3/4 of that engine's blocks and has no more requests in flight (an engine restarted with "
                          "an empty cache): moved there, one cold prefill, so a returned engine takes its share "
                          "(balance kv_events)")
    HOME = "home", "the prompt prefix's own replica on the ring"
    WARM = "warm", ("another replica that served the prefix lately: less loaded than the home, or the home was over "
                    "the load bound or ejected")
    SPILLED = "spilled", ("the home was over the load bound or ejected and this replica had not served the prefix: a "
                          "cold prefill")
    LEAST_LOADED = "least_loaded", ("no prefix key (balance least_loaded, embeddings): the healthy replica with the "
                                    "fewest requests in flight")


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
                bound: float, slack: int = 0, held_bound: float = 1.0, turn: int = 0,
                session: bool = False) -> int | None:
    """The healthy replica holding the most of the prompt's leading blocks (``held[i]``; of replicas holding
    as many, the one with fewer requests in flight, and of those as busy, each in turn: ``turn``) while its
    requests in flight stay within ``held_bound`` x the mean (or the load ``bound`` plus ``slack``,
    whichever allows more); past it, the next longest holder within the same. None when no replica within
    reach holds any block: the ring decides then.

    A holder's allowance is wide because the alternative is a cold prefill: a whole prefill spent to skip
    a wait behind requests that are mostly cached, and on a small pool the instantaneous count swings
    past a tight bound by chance (16 requests on 4 replicas put 6 or more on a given replica a fifth of
    the time). Deciding by the prefix first, and by load only at the allowance's edge and between equal
    holders, also keeps gateway replicas mostly alike: each sees loads of its own (its requests, other
    senders' as last read), but the same events.

    Replicas that hold as much cost the prompt the same prefill, so load decides between them at no cost in
    hits: a prompt that went past its holder's allowance once, and is held twice since, shares its requests
    between the two rather than sending them all back to the busier one until it is full again. Equal holders
    as busy take it in turn: at a few requests per engine loads tie most of the time, and the ring's order
    would give every shared prompt's requests to its first holder (an engine back from a restart, holding the
    prompts too, got a third of the last quarter's requests); both hold it, so the turn costs no hit. But a ``key``
    that is a named session's takes, of the replicas holding as much, the first on its ring walk within the allowance,
    busy or not: an agent's sessions share their long system prompt and tools, which every engine soon holds, and
    an engine's match may end within them (``kv_events.max_chars``), so equal holders are the rule there, and a turn
    sent by load to the other engine prefills the session's own conversation again."""
    live = [index for index in range(ring.size) if healthy[index]]
    if not live or not any(held):  # held nowhere, as most new prompts are: no ring walk to find no holder
        return None
    allowance = max(capacity(in_flight, live, bound) + slack, capacity(in_flight, live, held_bound))
    holders = [index for index in ring.walk(key) if healthy[index] and held[index] > 0]
    holders.sort(key=lambda index: (-held[index], in_flight[index]))  # stable: ties keep the walk's order
    within = [index for index in holders if in_flight[index] < allowance]
    if not within:
        return None
    if session:
        return next(index for index in ring.walk(key) if index in within and held[index] == held[within[0]])
    best = (held[within[0]], in_flight[within[0]])
    tied = [index for index in within if (held[index], in_flight[index]) == best]
    return tied[turn % len(tied)]


PLACEMENT_MARGIN = 0.75  # an engine holding under this share of the other's blocks is clearly the emptier


def placed_home(ring: HashRing, key: int, footprint: Sequence[int | None], in_flight: Sequence[int],
                healthy: Sequence[bool]) -> int | None:
    """For a prompt no engine holds: of the first two healthy replicas on the key's ring walk, the one
    whose engine holds under ``PLACEMENT_MARGIN`` of the blocks the other's holds (``footprint[i]``, from
    the KV events); between engines that hold about as much, or one that has reported nothing yet (None),
    the one with fewer requests in flight; between equals the first, the ring's home. None: no healthy
    replica.

    The ring alone places prompts as balls in bins: 48 prompts on 4 replicas often give one replica twice
    another's share, and the load bound then spills that replica's requests cold, each spill a whole
    prefill elsewhere. Two choices (Mitzenmacher's power of two choices) even the shares out. The blocks
    held come first because every gateway sees the same events, so gateways place a prompt alike, which
    two choices by each gateway's own load would not; the margin keeps a few blocks' difference from
    moving a prompt. Load decides where the blocks do not: once caches are full every engine holds about as
    many, and the ring's home would take every prompt dealt to it, each evicting another there and each
    eviction a cold prefill again; both replicas cost the prompt the same cold prefill, so the less busy
    one takes it at no cost in hits. The price: the prompt's first request counts on its replica, so a copy
    sent while that one is still prefilling (its blocks unreported) may go to the other of the two and be
    prefilled there too, small where prompts prefill fast."""
    first: int | None = None
    for index in ring.walk(key):
        if not healthy[index]:
            continue
        if first is None:
            first = index
            continue
        ours, theirs = footprint[first], footprint[index]
        if ours is not None and theirs is not None:
            if theirs < PLACEMENT_MARGIN * ours:
                return index
            if ours < PLACEMENT_MARGIN * theirs:
                return first
        return index if in_flight[index] < in_flight[first] else first
    return first


def rehomed(ring: HashRing, key: int, holder: int, held: Sequence[int], footprint: Sequence[int | None],
            in_flight: Sequence[int], healthy: Sequence[bool]) -> int | None:
    """Where a prompt held by ``holder`` alone moves, or None: the replica ``placed_home`` would give it were it
    held nowhere, when that is another replica whose engine holds under ``PLACEMENT_MARGIN`` of the holder's
    blocks and no more requests in flight.

    An engine that comes back after a restart holds nothing, and every prompt is held by the others: held
    choices alone would leave it the new prompts only, for good (in a soak with a kill, 400 answers against the
    other engine's 4,172). Moving a prompt costs one cold prefill; once moved it is held twice, and between
    equal holders load decides, so each prompt moves at most once and moves stop once the engines' footprints
    are within the margin, which placement keeps them in otherwise. Footprints are counts of blocks, so this
    holds for engines with caches of one size, as a pool's replicas are; an engine with a much smaller cache
    stays under the margin and would be sent the prompts it evicts again. Gateways read the same events but
    count their own requests in flight (unless ``kv_events.shared_load``), so they mostly move the same prompts."""
    if sum(1 for count in held if count > 0) != 1:
        return None
    target = placed_home(ring, key, footprint, in_flight, healthy)
    if target is None or target == holder:
        return None
    ours, theirs = footprint[target], footprint[holder]
    if ours is None or theirs is None or ours >= PLACEMENT_MARGIN * theirs or in_flight[target] > in_flight[holder]:
        return None
    return target


def pick_replica(in_flight: Sequence[int], healthy: Sequence[bool], *, key: int | None, ring: HashRing,
                 bound: float, home_slack: int, warm: int, start: int, held: Sequence[int] | None = None,
                 footprint: Sequence[int | None] | None = None,
                 held_bound: float = 1.0, session: bool = False) -> tuple[int, ReplicaReason] | None:
    """The replica's index and why: the one holding most of the prompt (``held``, from the engines'
    KV events), else by prefix ``key`` under the load ``bound`` (``warm``: bit i set when replica i
    served the prefix lately) from its home, which for a prompt held nowhere is the emptier (else the less
    loaded) of its two ring replicas (``placed_home`` of the engines' ``footprint``), else the least loaded. None
    when none is healthy.

    ``held`` must be this pool's, one count per replica on ``ring``: another pool's (a request that overflowed
    with its first pool's placement) would index past the end of a bigger pool, or name the wrong replicas of a
    smaller one, so a list of another length is refused outright."""
    if held is not None and len(held) != ring.size:
        raise ValueError(f"held counts {len(held)} replicas, the ring has {ring.size}: place the prompt in this pool")
    if key is None:
        index = least_loaded(in_flight, healthy, start)
        return None if index is None else (index, ReplicaReason.LEAST_LOADED)
    home = ring_home = ring.home(key)
    if held is not None:
        index = held_choice(ring, key, held, in_flight, healthy, bound, home_slack, held_bound, start, session)
        if index is not None:
            moved = rehomed(ring, key, index, held, footprint, in_flight, healthy) if footprint is not None else None
            return (index, ReplicaReason.HELD) if moved is None else (moved, ReplicaReason.REHOMED)
        if footprint is not None:  # by the engines' reports alone, which every gateway shares
            placed = placed_home(ring, key, footprint, in_flight, healthy)
            if placed is None:
                return None
            home, warm = placed, 0
    index = bounded_choice(ring, key, in_flight, healthy, bound, home_slack, warm, home=home)
    if index is None:
        return None
    if index == home:
        return index, ReplicaReason.HOME if home == ring_home else ReplicaReason.PLACED
    return index, ReplicaReason.WARM if warm >> index & 1 else ReplicaReason.SPILLED
