"""The passage cache: repeated questions skip the model and the store; ingests and tenants never mix."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from policies.retrieval.evidence import Chunk, Passage
from proxy.caches.tiered import TieredCache
from proxy.clock import SYSTEM_CLOCK
from proxy.config.retrieval import TenantRetrieval
from proxy.observability.metrics import Metrics
from proxy.retrieval.embeddings import VectorCache
from proxy.retrieval.passage_cache import RetrievalCache, cache_key
from proxy.retrieval.retriever import Retriever
from proxy.retrieval.vector_store import SearchQuery
from tests.support.clock import FakeClock
from tests.support.embedders import CountingEmbedder
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until_async

SETTINGS = TenantRetrieval(collection="docs")


class StubStore:
    """Answers every search with one chunk naming the tenant; versions are set by the test."""

    def __init__(self) -> None:
        self.searches = 0
        self.current: dict[tuple[str, str], str] = {}

    async def search_many(self, queries: list[SearchQuery]) -> list[list[Chunk] | Exception]:
        self.searches += len(queries)
        return [[Chunk(f"{q.tenant}.md", 0, f"A fact that belongs to {q.tenant}.", 0.9)] for q in queries]

    async def versions(self) -> dict[tuple[str, str], str]:
        return dict(self.current)

    async def aclose(self) -> None:
        return None


def retriever(store: StubStore, embedder: CountingEmbedder | None = None) -> Retriever:
    return Retriever(embedder or CountingEmbedder(), store, max_batch=8, max_wait=0,  # type: ignore[arg-type]
                     cache=RetrievalCache(ttl=60, empty_ttl=5, store=TieredCache(clock=SYSTEM_CLOCK)))


def test_a_repeated_question_is_served_from_the_cache_even_reworded_in_case_and_spacing() -> None:
    async def run() -> None:
        store = StubStore()
        cached = retriever(store)
        first = await cached.retrieve("acme", SETTINGS, "How long is the  warranty?")
        again = await cached.retrieve("acme", SETTINGS, "how long is the warranty?\n")
        assert store.searches == 1 and again.passages == first.passages
        assert "cache" in again.stages and "embed" not in again.stages

    asyncio.run(run())


def test_tenants_never_share_entries() -> None:
    async def run() -> None:
        store = StubStore()
        cached = retriever(store)
        acme = await cached.retrieve("acme", SETTINGS, "What is covered?")
        globex = await cached.retrieve("globex", SETTINGS, "What is covered?")
        assert store.searches == 2
        assert acme.passages is not None and globex.passages is not None
        assert "globex" in globex.passages[0].text and "acme" in acme.passages[0].text

    asyncio.run(run())


def test_an_ingest_that_changes_the_collection_makes_old_entries_unreadable() -> None:
    async def run() -> None:
        store = StubStore()
        cached = retriever(store)
        await cached.retrieve("acme", SETTINGS, "What is covered?")
        store.current[("docs", "globex")] = "2"  # another tenant's ingest: acme's entries stay good
        await cached.refresh_versions()
        await cached.retrieve("acme", SETTINGS, "What is covered?")
        assert store.searches == 1
        store.current[("docs", "acme")] = "7"
        await cached.refresh_versions()
        await cached.retrieve("acme", SETTINGS, "What is covered?")
        assert store.searches == 2

    asyncio.run(run())


def test_a_question_asked_again_after_an_ingest_is_searched_again_but_not_embedded_again() -> None:
    """The vector cache: an ingest makes the passages stale, never the question's vector; and a
    tenant's vectors are its own (a hit is faster, so sharing would tell one tenant what another asked)."""
    async def run() -> None:
        store = StubStore()
        embedder = CountingEmbedder()
        metrics = Metrics()
        cached = Retriever(embedder, store, max_batch=8, max_wait=0, metrics=metrics,  # type: ignore[arg-type]
                           cache=RetrievalCache(ttl=60, empty_ttl=5, store=TieredCache(clock=SYSTEM_CLOCK)),
                           vector_cache=VectorCache(16))
        first = await cached.retrieve("acme", SETTINGS, "What is covered?")
        store.current[("docs", "acme")] = "7"
        await cached.refresh_versions()
        again = await cached.retrieve("acme", SETTINGS, "What is covered?")
        assert store.searches == 2 and len(embedder.calls) == 1
        assert again.passages == first.passages
        await cached.retrieve("globex", SETTINGS, "What is covered?")
        assert len(embedder.calls) == 2
        text = metrics.render().decode()
        assert sample_sum(text, "prefixgate_embedding_cache_total", result="hit") == 1
        assert sample_sum(text, "prefixgate_embedding_cache_total", result="miss") == 2

    asyncio.run(run())


def test_the_vector_cache_keeps_the_most_recently_used_vectors() -> None:
    vectors = VectorCache(2)
    vectors.put("acme", "a", [0.5, 0.25])
    vectors.put("acme", "b", [1.0, 2.0])
    assert vectors.get("acme", "a") == [0.5, 0.25]  # a is now the most recent ...
    vectors.put("acme", "c", [3.0, 4.0])  # ... so b goes
    assert vectors.get("acme", "b") is None
    assert vectors.get("acme", "a") == [0.5, 0.25] and vectors.get("acme", "c") == [3.0, 4.0]
    assert vectors.get("globex", "a") is None


def test_keys_differ_by_every_part_that_changes_the_answer() -> None:
    base = cache_key("acme", "q", SETTINGS, "1")
    assert base != cache_key("globex", "q", SETTINGS, "1")
    assert base != cache_key("acme", "q", SETTINGS, "2")
    assert base != cache_key("acme", "q", TenantRetrieval(collection="docs", top_n=2), "1")
    assert base != cache_key("acme", "q", TenantRetrieval(collection="other"), "1")
    assert base == cache_key("acme", " Q ", SETTINGS, "1")


def test_empty_results_live_shorter_and_every_ttl_is_jittered() -> None:
    ttls: list[float] = []

    class Recording(TieredCache):
        async def put(self, key: str, value: Any, ttl: float) -> None:
            ttls.append(ttl)

    async def run() -> None:
        cache = RetrievalCache(ttl=300, empty_ttl=30, jitter=0.1, rng=random.Random(3),
                               store=Recording(clock=SYSTEM_CLOCK))
        passage = Passage("d", 0, 0, "text", 0.5, "", 1)
        for _ in range(20):
            await cache.put("k", (passage,))
            await cache.put("k", ())

    asyncio.run(run())
    full, empty = ttls[0::2], ttls[1::2]
    assert all(270 <= ttl <= 330 for ttl in full) and len(set(full)) == 20
    assert all(27 <= ttl <= 33 for ttl in empty)


def test_entries_expire() -> None:
    async def run() -> None:
        clock = FakeClock()
        cache = RetrievalCache(ttl=0.05, empty_ttl=0.05, jitter=0, store=TieredCache(clock=clock))
        await cache.put("k", ())
        assert await cache.get("k") == ()
        clock.advance(0.12)
        assert await cache.get("k") is None

    asyncio.run(run())


def test_a_stuck_embedder_costs_at_most_the_timeout_and_the_request_goes_on_without_context() -> None:
    async def run() -> None:
        never_answers = CountingEmbedder(held=True)  # and never released
        stuck = Retriever(never_answers, StubStore(), max_batch=8, max_wait=0, timeout=0.1)  # type: ignore[arg-type]
        retrieved = await asyncio.wait_for(stuck.retrieve("acme", SETTINGS, "Anything?"), timeout=2)
        assert retrieved.passages is None

    asyncio.run(run())


def test_concurrent_requests_with_one_question_share_one_retrieval() -> None:
    async def run() -> None:
        store = StubStore()
        cached = retriever(store)
        results = await asyncio.gather(*(cached.retrieve("acme", SETTINGS, "What is covered?") for _ in range(12)))
        assert store.searches == 1 and len(cached.embedder.calls) == 1  # type: ignore[attr-defined]
        assert all(result.passages == results[0].passages for result in results)
        assert sum("joined" in result.stages for result in results) == 11
        other = await cached.retrieve("globex", SETTINGS, "What is covered?")
        assert store.searches == 2 and other.passages != results[0].passages

    asyncio.run(run())


def test_a_client_that_leaves_does_not_cancel_the_retrieval_others_wait_for() -> None:
    async def run() -> None:
        store = StubStore()
        embedder = CountingEmbedder(held=True)
        cached = retriever(store, embedder)
        first = asyncio.ensure_future(cached.retrieve("acme", SETTINGS, "What is covered?"))
        await wait_until_async(lambda: embedder.calls, timeout=5, interval=0.001,
                               what="the first request's retrieval to reach the model")
        second = asyncio.ensure_future(cached.retrieve("acme", SETTINGS, "What is covered?"))
        await asyncio.sleep(0)  # one event-loop turn: the second request joins the retrieval under way
        first.cancel()
        embedder.release()
        result = await second
        assert result.passages and "acme" in result.passages[0].text and store.searches == 1

    asyncio.run(run())
