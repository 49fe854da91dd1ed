"""Retrieval on the request path: cache, else embed the question (micro-batched), search, select.

Built in the lifespan only when some tenant has retrieval on, so gateways without it never load
the embedding model. A failed retrieval never fails the request: it goes on without context.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

from policies.prompt.stable_prefix import CHARS_PER_TOKEN
from policies.retrieval.evidence import EvidencePolicy, Passage, select_evidence
from proxy.caches.tiered import tiered_cache
from proxy.clock import Clock
from proxy.config.gateway import Config
from proxy.config.retrieval import TenantRetrieval
from proxy.micro_batch import MicroBatcher
from proxy.observability.metrics import Metrics
from proxy.retrieval.embeddings import Embedder, LocalMiniLM, RemoteEmbeddings, VectorCache
from proxy.retrieval.passage_cache import RetrievalCache, cache_key
from proxy.retrieval.vector_store import SearchMode, SearchQuery, VectorStore

log = logging.getLogger("prefixgate")


def passage_budget_tokens(text: str) -> int:
    """A passage's tokens as ``retrieval.budget_tokens`` counts them: ~4 chars each (the engine's tokenizer is not run
    here; admission's ``estimate_prompt_tokens`` weighs multi-byte text too)."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass
class Retrieved:
    """What one request got: passages (None when retrieval failed) and seconds per stage."""

    passages: list[Passage] | None
    stages: dict[str, float] = field(default_factory=dict)

    def server_timing(self) -> bytes:
        """The stages as a Server-Timing header value (milliseconds), for browser and curl users."""
        return ", ".join(f"{stage};dur={seconds * 1000:.1f}" for stage, seconds in self.stages.items()).encode()


def search_mode(settings: TenantRetrieval) -> SearchMode:
    if settings.search == "dense":
        return SearchMode(1.0, 0.0, settings.rrf_k)
    if settings.search == "bm25":
        return SearchMode(0.0, 1.0, settings.rrf_k)
    return SearchMode(settings.dense_weight, settings.bm25_weight, settings.rrf_k)


StoreOpener = Callable[[int], VectorStore]
"""Opens the vector store for vectors of the given size; a seam for tests that run another layout."""


def configured_store(config: Config) -> StoreOpener:
    """The Qdrant the config names: a server by URL, else the embedded engine's folder."""
    settings = config.retrieval

    def open_store(dimensions: int) -> VectorStore:
        # imported here: a gateway that serves no tenant collection never loads Qdrant's engine (a 30 MB
        # library) or the client's gRPC stack
        from proxy.retrieval.edge_store import EdgeStore
        from proxy.retrieval.server_store import ServerStore

        if settings.qdrant_url:
            return ServerStore.open(settings.qdrant_url, dimensions=dimensions, timeout=settings.timeout,
                                    grpc_port=settings.qdrant_grpc_port)
        return EdgeStore.open(config.qdrant_path(), dimensions=dimensions)

    return open_store


class Retriever:
    def __init__(
        self, embedder: Embedder, store: VectorStore, *, max_batch: int, max_wait: float,
        metrics: Metrics | None = None, cache: RetrievalCache | None = None, timeout: float = 5.0,
        vector_cache: VectorCache | None = None,
    ) -> None:
        self.embedder = embedder
        self.timeout = timeout  # embed + search; past it the request goes on without context
        self.store = store
        self.metrics = metrics
        self.cache = cache
        self.vectors = vector_cache
        self.versions: dict[tuple[str, str], str] = {}  # (collection, tenant) -> version, polled
        self._poller: asyncio.Task[None] | None = None
        self._running: dict[str, asyncio.Future[Retrieved]] = {}  # cache key -> the retrieval under way
        on_batch = metrics.observe_embedding_batch if metrics is not None else None
        self.batcher = MicroBatcher(embedder.embed, max_batch=max_batch, max_wait=max_wait, on_batch=on_batch)
        # The questions of one embedding batch come back together; their searches go together too.
        self.searches = MicroBatcher(store.search_many, max_batch=max_batch)

    async def refresh_versions(self) -> None:
        """Learn which collections an ingest changed; cache keys hold the version, so stale entries go unread."""
        self.versions = await self.store.versions()

    async def _poll_versions(self, interval: float) -> None:
        while True:
            try:
                await self.refresh_versions()
            except Exception:
                log.warning("could not read collection versions; cached retrievals may be stale", exc_info=True)
            await asyncio.sleep(interval)

    @classmethod
    async def start(cls, config: Config, metrics: Metrics | None = None,
                    open_store: StoreOpener | None = None, *, clock: Clock) -> Retriever:
        """``open_store``: the vector store for the embedder's dimensions (default: the configured Qdrant)."""
        settings = config.retrieval
        embedder: Embedder
        if settings.embeddings_url:
            embedder = RemoteEmbeddings(settings.embeddings_url, settings.embeddings_model,
                                        settings.embeddings_dimensions, settings.timeout)
        else:
            # seconds of loading (the first start also exports the ONNX graph), off the event loop
            embedder = await asyncio.to_thread(LocalMiniLM, cache_dir=Path(config.data_dir) / "models")
        store = (open_store or configured_store(config))(embedder.dimensions)
        cache = None
        if settings.cache:
            cache = RetrievalCache(settings.cache_ttl_s, settings.cache_empty_ttl_s,
                                   store=tiered_cache(config.redis, "passages", metrics, clock=clock))
        vectors = VectorCache(settings.embedding_cache_size) if settings.embedding_cache_size else None
        retriever = cls(embedder, store, max_batch=settings.batch_max, max_wait=settings.batch_wait_ms / 1000,
                        metrics=metrics, cache=cache, timeout=settings.timeout, vector_cache=vectors)
        # Polled with or without a cache: it is also how an embedded store learns of another process's ingest, and
        # copies its collections; read once before the gateway serves, so its first searches find their copies.
        try:
            await retriever.refresh_versions()
        except Exception:
            log.warning("could not read collection versions at start; the poll tries again", exc_info=True)
        retriever._poller = asyncio.get_running_loop().create_task(retriever._poll_versions(settings.version_poll_s))
        return retriever

    async def retrieve(self, tenant: str, settings: TenantRetrieval, question: str) -> Retrieved:
        """The evidence for ``question`` from the tenant's own chunks.

        Concurrent requests with the same question share one embed + search (the first one's), so a
        question that turns hot on a cold cache costs one retrieval, not one per request.
        """
        if self.cache is None:
            return await self._search_and_select(tenant, settings, question)
        started = perf_counter()
        key = cache_key(tenant, question, settings, self.versions.get((settings.collection, tenant), "0"))
        cached = await self.cache.get(key)
        if cached is not None:
            self._count("hit")
            return Retrieved(list(cached), {"cache": perf_counter() - started})
        running = self._running.get(key)
        if running is not None:
            self._count("joined")
            retrieved = await asyncio.shield(running)
            return Retrieved(retrieved.passages, {"joined": perf_counter() - started})
        self._count("miss")
        running = self._running[key] = asyncio.ensure_future(self._search_and_select(tenant, settings, question, key))
        return await asyncio.shield(running)  # a client that leaves does not cancel the others' retrieval

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.retrieval_cache(result)

    async def _search_and_select(
        self, tenant: str, settings: TenantRetrieval, question: str, key: str | None = None,
    ) -> Retrieved:
        """Embed, search and select; with ``key``, cache the result and end the run others may have joined."""
        try:
            return await self._embed_search_select(tenant, settings, question, key)
        finally:
            if key is not None:
                self._running.pop(key, None)

    async def _embed_search_select(
        self, tenant: str, settings: TenantRetrieval, question: str, key: str | None,
    ) -> Retrieved:
        stages: dict[str, float] = {}
        started = perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                vector = [] if settings.search == "bm25" else await self._vector(tenant, question)
                stages["embed"] = perf_counter() - started
                query = SearchQuery(settings.collection, tenant, vector, settings.candidates, question,
                                    search_mode(settings))
                hits = await self.searches.submit(query)
                stages["search"] = perf_counter() - started - stages["embed"]
        except Exception:
            log.warning("retrieval failed for tenant %s; answering without context", tenant, exc_info=True)
            if self.metrics is not None:
                self.metrics.retrieval_failed()
            return Retrieved(None, stages)
        selecting = perf_counter()
        policy = EvidencePolicy(top_n=settings.top_n, budget_tokens=settings.budget_tokens,
                                duplicate_similarity=settings.duplicate_similarity)
        passages = select_evidence(hits, policy, passage_budget_tokens)
        stages["select"] = perf_counter() - selecting
        if self.metrics is not None:
            self.metrics.observe_retrieval(stages)
        if key is not None and self.cache is not None:
            await self.cache.put(key, tuple(passages))
        return Retrieved(passages, stages)

    async def _vector(self, tenant: str, question: str) -> list[float]:
        if self.vectors is None:
            return await self.batcher.submit(question)
        vector = self.vectors.get(tenant, question)
        if self.metrics is not None:
            self.metrics.embedding_cache("miss" if vector is None else "hit")
        if vector is None:
            vector = await self.batcher.submit(question)
            self.vectors.put(tenant, question, vector)
        return vector

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        await self.store.aclose()
        await self.embedder.aclose()
        if self.cache is not None:
            await self.cache.aclose()
