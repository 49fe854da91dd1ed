"""Which replicas of a pool served a prompt prefix lately: the warm mask the replica choice reads.

Kept per gateway process and per pool, as a hint: a replica that served a prefix within the last
``seconds`` most likely still holds its KV blocks, so the prefix's requests may go there (when it
is less loaded than the home, or the home is over the bound) rather than to a replica that would
prefill it cold. Processes keep their own; they agree on each prefix's home regardless (the
ring), and a wrong hint costs only what a spill costs anyway.
"""

from __future__ import annotations

from cachetools import TTLCache

from proxy.clock import Clock

ENTRIES = 65_536  # prefixes remembered per pool; ~10 MB at most, far more than a pool's engines cache


class WarmPrefixes:
    __slots__ = ("_masks",)

    def __init__(self, seconds: float, entries: int = ENTRIES, *, clock: Clock) -> None:
        self._masks: TTLCache[int, int] = TTLCache(entries, seconds, timer=clock)

    def mask(self, key: int) -> int:
        """Bit i set: replica i served ``key`` within the window (since the key's last request)."""
        return self._masks.get(key, 0)

    def remember(self, key: int, mask: int) -> None:
        """Store ``key``'s mask (the one read for this request, with the chosen replica's bit added)."""
        self._masks[key] = mask
