"""Which prompt blocks each engine holds, from the engines' own KV-cache events.

An engine with prefix caching keeps a prompt's KV in blocks of ``block_size`` tokens and reports each
block it stores (vLLM's ``BlockStored``: the blocks' hashes, their parent's hash, their token IDs and
extra keys such as the cache salt) and each it evicts (``BlockRemoved``, ``AllBlocksCleared``).
``HeldBlocks`` replays those events into one index over a pool's replicas, so a request can be scored
by how much of its prompt each replica holds now, evictions included, rather than by where a hash ring
guesses it went.

The index keys a block by a chain over the token IDs themselves, ``block_keys``: the parent's key, the
block's tokens and its extra keys, as the engine chains its own hashes. A gateway keys a request the
same way from its tokens, so it never has to reproduce the engine's hash function (pickle or CBOR,
SHA-256 or xxHash, a seed) and matches any of them. The salt is part of the first block's key, as in the
engine: a tenant's request never matches another tenant's blocks of the same text. Keys come from
Python's ``hash`` of tuples: fast (a 4,000-token prompt is 250 blocks), and the same for the events and
the requests because both are keyed in the same process.

Each block key maps to a bitmask of the replicas holding it (one int per block, not a set). A replica
whose events were lost (a gap in their sequence, a restarted engine) is cleared: forgetting what it holds
costs a few routing misses, trusting a stale picture costs more. ``max_blocks`` bounds what one replica
may hold in the index; past it the replica is cleared too, which only happens if its removals went
missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ROOT = 0  # the parent key of a prompt's first block


def block_keys(tokens: Sequence[int], block_size: int, salt: str | None) -> list[int]:
    """The chained key of each full block of ``tokens``; the salt goes into the first block's, as the
    engine puts ``cache_salt`` into its first block's extra keys."""
    return extend_keys(KeyChain(), tokens, block_size, salt).keys


@dataclass(frozen=True, slots=True)
class KeyChain:
    """Where the keys of a prompt stand after some of its tokens: the blocks' keys so far, the last key
    (the next block's parent), the tokens past the last full block."""

    keys: list[int] = field(default_factory=list)
    parent: int = ROOT
    tail: tuple[int, ...] = ()


def extend_keys(chain: KeyChain, tokens: Sequence[int], block_size: int, salt: str | None) -> KeyChain:
    """``chain`` continued by ``tokens``: the prompt's keys computed a piece at a time give the same keys
    as ``block_keys`` of the whole."""
    ids = chain.tail + tuple(tokens)
    keys, parent = list(chain.keys), chain.parent
    for start in range(0, len(ids) - block_size + 1, block_size):
        extra = (salt,) if salt and parent == ROOT else None  # the prompt's first block
        parent = hash((parent, ids[start:start + block_size], extra))
        keys.append(parent)
    done = len(keys) - len(chain.keys)
    return KeyChain(keys, parent, ids[done * block_size:])


def _extra(entry: Any) -> tuple[Any, ...] | None:
    """An event's extra keys for one block, as ``block_keys`` writes them (msgpack gives lists)."""
    if not entry:
        return None
    return tuple(tuple(item) if isinstance(item, list) else item for item in entry)


class HeldBlocks:
    """The prompt blocks each of a pool's replicas holds, by key; replica ``i`` is bit ``i``."""

    __slots__ = ("by_engine_hash", "holders", "max_blocks", "replicas")

    def __init__(self, replicas: int, max_blocks: int = 1 << 20) -> None:
        self.replicas = replicas
        self.max_blocks = max_blocks
        self.holders: dict[int, int] = {}  # block key -> bitmask of the replicas holding it
        # per replica: its engine's hash of a block -> our key (for the parents of later blocks, and evictions)
        self.by_engine_hash: list[dict[Any, int]] = [{} for _ in range(replicas)]

    def stored(self, replica: int, parent: Any, hashes: Sequence[Any], tokens: Sequence[int], block_size: int,
               extra_keys: Sequence[Any] | None = None) -> bool:
        """Blocks the replica stored: ``hashes[i]`` holds ``tokens[i*block_size:(i+1)*block_size]``,
        chained after the block the engine calls ``parent`` (None: the prompt's start). False when the
        parent is unknown here (its event was lost), and the blocks are not indexed."""
        known = self.by_engine_hash[replica]
        if parent is None:
            key = ROOT
        else:
            found = known.get(parent)
            if found is None:
                return False
            key = found
        bit = 1 << replica
        holders = self.holders
        for index, engine_hash in enumerate(hashes):
            block = tuple(tokens[index * block_size:(index + 1) * block_size])
            if len(block) < block_size:
                break  # a partial block is never shared
            extra = _extra(extra_keys[index]) if extra_keys is not None and index < len(extra_keys) else None
            key = hash((key, block, extra))
            holders[key] = holders.get(key, 0) | bit
            known[engine_hash] = key
        if len(known) > self.max_blocks:
            self.cleared(replica)
        return True

    def removed(self, replica: int, hashes: Sequence[Any]) -> None:
        known, holders, keep = self.by_engine_hash[replica], self.holders, ~(1 << replica)
        for engine_hash in hashes:
            key = known.pop(engine_hash, None)
            if key is None:
                continue
            mask = holders.get(key, 0) & keep
            if mask:
                holders[key] = mask
            else:
                holders.pop(key, None)

    def cleared(self, replica: int) -> None:
        """The replica holds nothing we know of: its cache was reset, or we lost track of it."""
        self.removed(replica, list(self.by_engine_hash[replica]))

    def held(self, keys: Sequence[int]) -> list[int]:
        """How many of the prompt's leading blocks (``block_keys``) each replica holds: the engine reuses
        a prefix only up to its first missing block."""
        walk = HeldWalk(self)
        walk.extend(keys)
        return walk.held()

    def size(self, replica: int) -> int:
        return len(self.by_engine_hash[replica])


class HeldWalk:
    """``HeldBlocks.held`` a piece of the prompt at a time: each piece's keys are looked up once, and
    the walk can stop as soon as no replica holds the prompt so far."""

    __slots__ = ("alive", "depth", "index", "stopped_at")

    def __init__(self, index: HeldBlocks) -> None:
        self.index = index
        self.alive = (1 << index.replicas) - 1  # the replicas holding every block so far
        self.depth = 0  # blocks walked
        self.stopped_at = [0] * index.replicas  # for a replica no longer alive: the blocks it held

    def extend(self, keys: Sequence[int]) -> bool:
        """Walk on through ``keys``; False once no replica holds the prompt this far."""
        holders, alive, depth = self.index.holders, self.alive, self.depth
        for key in keys:
            if not alive:
                break
            mask = holders.get(key, 0) & alive
            lost = alive & ~mask
            while lost:
                low = lost & -lost
                self.stopped_at[low.bit_length() - 1] = depth
                lost ^= low
            alive = mask
            depth += 1
        self.alive, self.depth = alive, depth
        return bool(alive)

    def held(self) -> list[int]:
        held = list(self.stopped_at)
        alive = self.alive
        while alive:
            low = alive & -alive
            held[low.bit_length() - 1] = self.depth
            alive ^= low
        return held
