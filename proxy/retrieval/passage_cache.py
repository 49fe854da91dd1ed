"""Cache of selected passages, so a repeated question skips embedding, search and selection.

Keyed by a SHA-256 of tenant, normalized question, collection, the collection's version and the
selection parameters: a tenant can only ever read its own entries, and after an ingest changes the
collection's version, old entries are never read again (they expire by TTL). TTLs carry random
jitter so entries written together do not expire together; empty results live shorter, since the
documents that would answer may be ingested soon.
"""

from __future__ import annotations

import hashlib
import random
import unicodedata

import orjson

from policies.retrieval.evidence import Passage
from proxy.caches.tiered import TieredCache
from proxy.config.retrieval import TenantRetrieval


def normalized_question(text: str) -> str:
    """Case, Unicode form and whitespace do not make a different question."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def cache_key(tenant: str, question: str, settings: TenantRetrieval, version: str) -> str:
    parts = [tenant, normalized_question(question), settings.collection, version, settings.candidates,
             settings.top_n, settings.budget_tokens, settings.duplicate_similarity, settings.search,
             settings.dense_weight, settings.bm25_weight, settings.rrf_k]
    return hashlib.sha256(orjson.dumps(parts)).hexdigest()


def _passages(raw: list[dict]) -> tuple[Passage, ...]:
    """Passages back from their JSON form in Redis."""
    return tuple(Passage(**fields) for fields in raw)


class RetrievalCache:
    """Selected passages per key, in process and, when configured, in Redis shared by replicas (``store``:
    ``tiered_cache``)."""

    def __init__(
        self, ttl: float, empty_ttl: float, jitter: float = 0.1, rng: random.Random | None = None, *,
        store: TieredCache,
    ) -> None:
        self.ttl = ttl
        self.empty_ttl = empty_ttl
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._store = store
        self._store.decode = _passages

    @property
    def shared(self) -> bool:
        return self._store.shared

    async def get(self, key: str) -> tuple[Passage, ...] | None:
        return await self._store.get(key)

    async def put(self, key: str, passages: tuple[Passage, ...]) -> None:
        base = self.ttl if passages else self.empty_ttl
        await self._store.put(key, passages, base * self._rng.uniform(1 - self.jitter, 1 + self.jitter))

    async def clear(self) -> None:
        await self._store.clear()

    async def aclose(self) -> None:
        await self._store.aclose()
