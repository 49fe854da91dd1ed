"""Tenant isolation and search modes in both vector stores.

The embedded engine (``EdgeStore``) and a Qdrant server (``ServerStore``, here on qdrant-client's
in-memory engine) keep tenants together and filter on an indexed tenant key. Both must answer the same:
a tenant sees, counts and deletes only its own chunks, even where another tenant has a document of the
same name; and both find a chunk by meaning, by words, or by both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.server_store import ServerStore
from proxy.retrieval.vector_store import SearchMode, SearchQuery, StoredChunk, VectorStore

# The server layout runs here on qdrant-client's in-memory engine, which warns that it ignores the
# tenant index that a real server uses; the filter it applies is the same.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

BM25 = SearchMode(0.0, 1.0)
HYBRID = SearchMode(1.0, 1.0)


def chunk(tenant: str, doc_id: str, index: int, vector: list[float], text: str | None = None) -> StoredChunk:
    point_id = f"00000000-0000-4000-8000-{abs(hash((tenant, doc_id, index))) % 10**12:012d}"
    return StoredChunk(point_id, vector, tenant, doc_id, index, text or f"{tenant} {doc_id} #{index}", doc_id, 0, 10)


def open_store(kind: str, folder: Path) -> VectorStore:
    if kind == "embedded engine":
        return EdgeStore.open(folder / "qdrant", dimensions=3)
    return ServerStore(AsyncQdrantClient(location=":memory:"), 3)


@pytest.fixture(params=["embedded engine", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    opened = open_store(request.param, tmp_path)
    for tenant in ("acme", "globex"):
        await opened.ensure_collection("docs", tenant)
        await opened.upsert("docs", tenant, [chunk(tenant, "faq", i, [1.0, i / 10, 0.0]) for i in range(3)]
                            + [chunk(tenant, "terms", 0, [0.0, 1.0, 0.0])])
    yield opened
    await opened.aclose()


async def test_search_returns_only_the_tenants_own_chunks(store: VectorStore) -> None:
    for tenant in ("acme", "globex"):
        hits = await store.search("docs", tenant, [1.0, 0.0, 0.0], 10)
        assert len(hits) == 4 and {hit.text.split()[0] for hit in hits} == {tenant}
        assert hits[0].doc_id == "faq" and hits[-1].doc_id == "terms"  # ordered by similarity


async def test_delete_and_count_stay_within_the_tenant(store: VectorStore) -> None:
    assert await store.delete_document("docs", "acme", "faq") == 3
    assert await store.count("docs", "acme") == 1
    assert await store.count("docs", "globex") == 4  # globex's own "faq" is untouched
    assert [hit.doc_id for hit in await store.search("docs", "acme", [1.0, 0.0, 0.0], 10)] == ["terms"]


async def test_a_tenant_never_ingested_is_empty_and_a_missing_collection_an_error(store: VectorStore) -> None:
    assert await store.search("docs", "initech", [1.0, 0.0, 0.0], 10) == []
    assert await store.count("docs", "initech") == 0
    assert await store.delete_document("other", "acme", "faq") == 0
    with pytest.raises(ValueError, match="Collection other not found"):
        await store.search("other", "acme", [1.0, 0.0, 0.0], 10)


async def test_a_batch_of_searches_answers_each_query_for_its_own_tenant(store: VectorStore) -> None:
    queries = [SearchQuery("docs", "acme", [1.0, 0.0, 0.0], 2), SearchQuery("other", "acme", [1.0, 0.0, 0.0], 2),
               SearchQuery("docs", "globex", [0.0, 1.0, 0.0], 1), SearchQuery("docs", "initech", [1.0, 0.0, 0.0], 2)]
    acme, missing, globex, initech = await store.search_many(queries)
    assert isinstance(acme, list) and [hit.text for hit in acme] == ["acme faq #0", "acme faq #1"]
    assert isinstance(missing, ValueError) and "Collection other not found" in str(missing)
    assert isinstance(globex, list) and [hit.text for hit in globex] == ["globex terms #0"]
    assert initech == []


async def test_in_the_embedded_engine_a_bad_query_fails_alone(tmp_path: Path) -> None:
    store = open_store("embedded engine", tmp_path)
    try:
        await store.ensure_collection("docs", "acme")
        await store.upsert("docs", "acme", [chunk("acme", "faq", 0, [1.0, 0.0, 0.0])])
        wrong_size, fine = await store.search_many([SearchQuery("docs", "acme", [1.0, 0.0], 2),
                                                    SearchQuery("docs", "acme", [1.0, 0.0, 0.0], 2)])
    finally:
        await store.aclose()
    assert isinstance(wrong_size, Exception)
    assert isinstance(fine, list) and [hit.text for hit in fine] == ["acme faq #0"]


async def test_upsert_refuses_chunks_of_another_tenant(store: VectorStore) -> None:
    with pytest.raises(ValueError, match="globex"):
        await store.upsert("docs", "globex", [chunk("acme", "faq", 9, [1.0, 0.0, 0.0])])


@pytest.fixture(params=["embedded engine", "server"])
async def worded(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    """Three chunks whose vectors all point the same way: only their words tell them apart."""
    opened = open_store(request.param, tmp_path)
    texts = ["Error E-4021 means the card was declined by the bank.",
             "The free trial lasts fourteen days on every plan.",
             "Invoices are sent on the first day of each month."]
    await opened.ensure_collection("docs", "acme")
    await opened.upsert("docs", "acme", [chunk("acme", f"page{i}", 0, [1.0, 0.01 * i, 0.0], text)
                                         for i, text in enumerate(texts)])
    await opened.upsert("docs", "globex", [chunk("globex", "leak", 0, [1.0, 0.0, 0.0], "Error E-4021 at globex")])
    yield opened
    await opened.aclose()


async def test_bm25_finds_a_code_that_the_vectors_cannot_tell_apart(worded: VectorStore) -> None:
    dense = await worded.search("docs", "acme", [1.0, 0.2, 0.0], 3, text="what is E-4021?")
    assert dense[0].doc_id == "page2"  # by meaning alone, the nearest vector wins
    by_words = await worded.search("docs", "acme", [1.0, 0.2, 0.0], 3, text="what is E-4021?", mode=BM25)
    assert [hit.doc_id for hit in by_words] == ["page0"]  # only chunks that share a word; never globex's
    fused = await worded.search("docs", "acme", [1.0, 0.2, 0.0], 3, text="what is E-4021?", mode=HYBRID)
    assert fused[0].doc_id == "page0" and len(fused) == 3  # the words lift it; the rest still come by meaning


async def test_a_question_with_no_words_to_match_falls_back_to_meaning(worded: VectorStore) -> None:
    fused = await worded.search("docs", "acme", [1.0, 0.2, 0.0], 3, text="?", mode=HYBRID)
    assert [hit.doc_id for hit in fused][:1] == ["page2"]
    assert await worded.search("docs", "acme", [1.0, 0.2, 0.0], 3, text="?", mode=BM25) == []
