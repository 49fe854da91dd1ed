"""Tenant isolation in both of the vector store's layouts.

Local mode keeps one collection per (collection, tenant); a server keeps tenants together and filters
on an indexed tenant key. Both must answer the same: a tenant sees, counts and deletes only its own
chunks, even where another tenant has a document of the same name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from proxy.retrieval.vector_store import SearchQuery, StoredChunk, VectorStore, local_collection_name

# The server layout runs here on qdrant-client's in-memory engine, which warns that it ignores the
# tenant index that a real server uses; the filter it applies is the same.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


def chunk(tenant: str, doc_id: str, index: int, vector: list[float]) -> StoredChunk:
    point_id = f"00000000-0000-4000-8000-{abs(hash((tenant, doc_id, index))) % 10**12:012d}"
    return StoredChunk(point_id, vector, tenant, doc_id, index, f"{tenant} {doc_id} #{index}", doc_id, 0, 10)


@pytest.fixture(params=["per-tenant collections (local mode)", "tenant filter (server layout)"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    if request.param.startswith("per-tenant"):
        opened = VectorStore.open(dimensions=3, path=tmp_path / "qdrant")
    else:
        opened = VectorStore(AsyncQdrantClient(location=":memory:"), 3, per_tenant_collections=False)
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


async def test_in_local_mode_a_bad_query_fails_alone(tmp_path: Path) -> None:
    store = VectorStore.open(dimensions=3, path=tmp_path / "qdrant")
    try:
        await store.ensure_collection("docs", "acme")
        await store.upsert("docs", "acme", [chunk("acme", "faq", 0, [1.0, 0.0, 0.0])])
        wrong_size, fine = await store.search_many([SearchQuery("docs", "acme", [1.0, 0.0], 2),
                                                    SearchQuery("docs", "acme", [1.0, 0.0, 0.0], 2)])
    finally:
        await store.aclose()
    assert isinstance(wrong_size, ValueError)
    assert isinstance(fine, list) and [hit.text for hit in fine] == ["acme faq #0"]


async def test_upsert_refuses_chunks_of_another_tenant(store: VectorStore) -> None:
    with pytest.raises(ValueError, match="globex"):
        await store.upsert("docs", "globex", [chunk("acme", "faq", 9, [1.0, 0.0, 0.0])])


def test_local_collection_names_are_valid_for_any_tenant_name() -> None:
    names = {local_collection_name("docs", tenant) for tenant in ("acme", "Acme", "a/b c", "日本", "")}
    assert len(names) == 5
    assert all(name.startswith("docs--") and name.replace("-", "").isalnum() for name in names)
