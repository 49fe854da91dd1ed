"""Prefix-affine replica choice: consistent hashing with bounded loads.

Requests whose prompts start alike should land on the same engine, whose prefix cache already holds
that start; spreading them round-robin makes every replica prefill the same prefix. The key is a
hash of the prompt's first characters (with the model and the tenant's cache salt, since an engine
never shares blocks across salts), placed on a ring of replica points. Every gateway process builds
the same ring from the same replica URLs, so all of them pick the same engine for a prefix with no
shared state.

A hot prefix must not pile onto one engine: a replica is taken only while its load after taking the
request stays within ``bound`` times the mean (Mirrokni, Thorup and Zadimoghaddam, "Consistent
Hashing with Bounded Loads", 2018); otherwise the walk goes on clockwise to the next replica, which
is the same "second choice" in every process. A replica's load is this process's requests in
flight plus, where its engine's /metrics were read lately, the requests other senders have there
(``parse_engine_metrics``), so processes that share engines see each other's load.

Each spill costs the replica it lands on a cold prefill of the prefix, unless that replica served
the prefix lately (the caller's ``warm`` mask, kept per process). So a prefix's requests go to the
least loaded of the replicas that hold it (its home first on a tie); only a prefix with no such
replica within the bound may take the home past it, by ``home_slack`` requests, before it spills
cold. At the few requests per engine of a small pool the bound is one request over the mean and
hot prefixes spill often; both rules cut the prefixes that ever need a second replica
(docs/benchmarks.md has the numbers on 4 CPU engines). At the tens of requests per engine of a GPU
pool the slack hardly counts.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from hashlib import blake2b

from policies.prompt.stable_prefix import Pieces

POINTS_PER_REPLICA = 64  # enough for an even split of keys over a handful of replicas


def _hash64(data: bytes) -> int:
    """A process-independent 64-bit hash (Python's hash() of str is salted per process)."""
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


def prefix_key(pieces: Pieces, model: str, salt: str | None, chars: int) -> int:
    """Hash of the model, the cache salt and the first ``chars`` characters of the rendered prompt."""
    head: list[str] = []
    left = chars
    for piece in pieces:
        if len(piece) >= left:
            head.append(piece[:left])
            break
        head.append(piece)
        left -= len(piece)
    return _hash64("\x00".join((model, salt or "", "".join(head))).encode("utf-8", "surrogatepass"))


def session_key(session: str, model: str, salt: str | None) -> int:
    """A named session's key on the ring (``policies.routing.sessions``), in place of its prompt's: with the
    model and the salt, as an engine shares blocks only within them."""
    return _hash64("\x00".join((model, salt or "", "session", session)).encode("utf-8", "surrogatepass"))


class HashRing:
    """Points of each replica on a 64-bit ring; built once per pool from its replica names."""

    __slots__ = ("_indexes", "_points", "size")

    def __init__(self, names: Sequence[str], points_per_replica: int = POINTS_PER_REPLICA) -> None:
        ring = sorted((_hash64(f"{name}#{n}".encode()), index)
                      for index, name in enumerate(names) for n in range(points_per_replica))
        self._points = [point for point, _ in ring]
        self._indexes = [index for _, index in ring]
        self.size = len(names)

    def home(self, key: int) -> int:
        """The replica index ``key`` maps to before health and load are considered."""
        return self._indexes[bisect.bisect_left(self._points, key) % len(self._points)]

    def walk(self, key: int) -> Iterator[int]:
        """Replica indexes clockwise from ``key``, each once."""
        seen: set[int] = set()
        start = bisect.bisect_left(self._points, key)
        count = len(self._points)
        for offset in range(count):
            index = self._indexes[(start + offset) % count]
            if index not in seen:
                seen.add(index)
                yield index
                if len(seen) == self.size:
                    return


def capacity(in_flight: Sequence[int], live: Sequence[int], bound: float) -> int:
    """Requests a live replica may hold, this one counted: ``bound`` x the mean load, rounded up."""
    return math.ceil(bound * (sum(in_flight[index] for index in live) + 1) / len(live))


def bounded_choice(ring: HashRing, key: int, in_flight: Sequence[int], healthy: Sequence[bool],
                   bound: float, home_slack: int = 0, warm: int = 0, home: int | None = None) -> int | None:
    """The replica for ``key``, of those whose load stays within ``bound`` x the mean: the least
    loaded of its home and the replicas that hold the prefix already (bit i of ``warm`` set: replica
    i served it lately), ties going to the first on the key's walk; failing those, the home while
    within the bound plus ``home_slack``; failing that, the first within the bound clockwise. The
    home is the first healthy replica on the walk, the same in every process.

    Loads count this request: a replica may hold ceil(bound * (in flight + 1) / healthy replicas).
    A spill to a warm replica costs no prefill, a spill elsewhere a whole cold one. So a hot prompt
    that spilled once shares its load between the two replicas that hold it, the slack is spent
    only on prompts with nowhere warm to go, and fewer prompts ever need a second replica. With no
    warm replica besides the home this is plain consistent hashing with bounded loads. ``home``, when
    given and healthy, stands in for the first on the walk (``placed_home``). None when no replica is
    healthy.
    """
    live = [index for index in range(ring.size) if healthy[index]]
    if not live:
        return None
    limit = capacity(in_flight, live, bound)
    walk = [index for index in ring.walk(key) if healthy[index]]
    if home is not None and healthy[home]:
        walk.remove(home)
        walk.insert(0, home)
    home = walk[0]
    best = home if in_flight[home] < limit else None
    if warm:
        for index in walk[1:]:
            if warm >> index & 1 and in_flight[index] < limit:
                if best is None or in_flight[index] < in_flight[best]:
                    best = index
    if best is not None:
        return best
    if in_flight[home] < limit + home_slack:
        return home
    for index in walk[1:]:
        if in_flight[index] < limit:
            return index
    # Not reached for bound >= 1: the least loaded live replica holds at most the mean, so fits.
    return min(live, key=in_flight.__getitem__)
