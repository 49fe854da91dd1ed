"""Chunks on a Qdrant server (``retrieval.qdrant_url``), shared by every gateway and ingest that names it.

Tenants share a collection and are kept apart by an indexed tenant key that every search, count and
delete filters on. Writes are live: a server has no generations to publish, so ``writing`` only bumps
the collection's version when the ingest ends (success or not: some chunks may have changed).

Collections made before hybrid search hold one unnamed dense vector per chunk. They keep working, dense
only (a BM25 or hybrid tenant searches them by meaning, with a warning once), until ingested again into
a new collection.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from policies.retrieval.evidence import Chunk
from proxy.retrieval.documents import RECORD_FIELDS, DocumentRecord, record_id
from proxy.retrieval.vector_store import (
    DENSE_VECTOR,
    SPARSE_VECTOR,
    SearchQuery,
    StoredChunk,
    VectorStore,
    WordVectors,
    chunk_of,
)

log = logging.getLogger("prefixgate")

VERSIONS = "prefixgate_versions"  # one point per (collection, tenant): bumped by every ingest or delete
RECORDS = "prefixgate_documents"
_VERSION_NAMESPACE = uuid.UUID("0b7e4c2a-9d3f-5e1b-8a6c-4f2d7e9b1c30")
_PAGE = 512


def field_is(key: str, value: str) -> models.FieldCondition:
    """A filter condition: the payload field ``key`` equals ``value``."""
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def tenant_filter(tenant: str, **fields: str) -> models.Filter:
    return models.Filter(must=[field_is("tenant", tenant), *(field_is(k, v) for k, v in fields.items())])


async def index_tenant_key(client: AsyncQdrantClient, collection: str) -> None:
    """Index the payload field ``tenant`` as Qdrant's tenant key (collections shared by tenants)."""
    await client.create_payload_index(
        collection, "tenant", field_schema=models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD,
                                                                    is_tenant=True), wait=True)


async def _ensure_plain(client: AsyncQdrantClient, name: str) -> None:
    """A collection of payload-only points (versions, records): one unused 1-wide vector."""
    if await client.collection_exists(name):
        return
    await client.create_collection(name, vectors_config=models.VectorParams(size=1, distance=models.Distance.DOT))
    await index_tenant_key(client, name)


class ServerRecords:
    """Document records in one collection shared by all collections and tenants, filtered on both."""

    def __init__(self, client: AsyncQdrantClient) -> None:
        self.client = client

    async def load(self, collection: str, tenant: str) -> dict[str, DocumentRecord]:
        if not await self.client.collection_exists(RECORDS):
            return {}
        selector = tenant_filter(tenant, collection=collection)
        records: dict[str, DocumentRecord] = {}
        offset: Any = None
        while True:
            points, offset = await self.client.scroll(RECORDS, scroll_filter=selector, limit=_PAGE, offset=offset,
                                                      with_payload=RECORD_FIELDS, with_vectors=False)
            for point in points:
                record = DocumentRecord.from_payload(point.payload or {})
                records[record.doc_id] = record
            if offset is None:
                return records

    async def text(self, collection: str, tenant: str, doc_id: str) -> str | None:
        if not await self.client.collection_exists(RECORDS):
            return None
        points = await self.client.retrieve(RECORDS, [record_id(collection, tenant, doc_id)], with_payload=["text"])
        return (points[0].payload or {}).get("text") if points else None

    async def put(self, collection: str, tenant: str, record: DocumentRecord) -> None:
        await _ensure_plain(self.client, RECORDS)
        point = models.PointStruct(id=record_id(collection, tenant, record.doc_id), vector=[1.0],
                                   payload=record.payload(collection, tenant))
        await self.client.upsert(RECORDS, points=[point], wait=True)

    async def remove(self, collection: str, tenant: str, doc_id: str) -> None:
        if await self.client.collection_exists(RECORDS):
            selector = models.PointIdsList(points=[record_id(collection, tenant, doc_id)])
            await self.client.delete(RECORDS, points_selector=selector, wait=True)


class ServerStore(VectorStore):
    def __init__(self, client: AsyncQdrantClient, dimensions: int) -> None:
        self.client = client
        self.dimensions = dimensions
        self.records = ServerRecords(client)
        self.words = WordVectors()
        self._named: dict[str, bool] = {}  # collection -> holds named dense + bm25 vectors (else: made before)

    @classmethod
    def open(cls, url: str, *, dimensions: int, timeout: float = 5.0, grpc_port: int = 6334) -> ServerStore:
        """Reached over gRPC on ``grpc_port`` (the URL's port is its REST port, used by qdrant-client for its
        start-up version check)."""
        client = AsyncQdrantClient(url=url, prefer_grpc=True, grpc_port=grpc_port, timeout=int(max(1, timeout)))
        return cls(client, dimensions)

    async def _is_named(self, collection: str) -> bool:
        named = self._named.get(collection)
        if named is None:
            info = await self.client.get_collection(collection)
            named = self._named[collection] = isinstance(info.config.params.vectors, dict)
            if not named:
                log.warning("collection %s was made before hybrid search: it is searched by meaning only until "
                            "its documents are ingested into a new collection", collection)
        return named

    async def ensure_collection(self, collection: str, tenant: str) -> None:
        if await self.client.collection_exists(collection):
            return
        await self.client.create_collection(
            collection,
            vectors_config={DENSE_VECTOR: models.VectorParams(size=self.dimensions, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        await self.client.create_payload_index(collection, "doc_id", models.PayloadSchemaType.KEYWORD, wait=True)
        await index_tenant_key(self.client, collection)

    @asynccontextmanager
    async def writing(self, collection: str, tenant: str) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.bump_version(collection, tenant)

    async def upsert(self, collection: str, tenant: str, chunks: Sequence[StoredChunk]) -> None:
        self.check_tenant(tenant, chunks)
        named = await self._is_named(collection)
        points = []
        for chunk in chunks:
            vector: Any = chunk.vector
            if named:
                indices, values = self.words.document(chunk.text)
                vector = {DENSE_VECTOR: chunk.vector,
                          SPARSE_VECTOR: models.SparseVector(indices=indices, values=values)}
            points.append(models.PointStruct(id=chunk.id, vector=vector, payload=chunk.payload()))
        await self.client.upsert(collection, points=points, wait=True)

    async def delete_document(self, collection: str, tenant: str, doc_id: str) -> int:
        if not await self.client.collection_exists(collection):
            return 0
        selector = tenant_filter(tenant, doc_id=doc_id)
        count = (await self.client.count(collection, count_filter=selector, exact=True)).count
        await self.client.delete(collection, points_selector=models.FilterSelector(filter=selector), wait=True)
        return count

    async def count(self, collection: str, tenant: str) -> int:
        if not await self.client.collection_exists(collection):
            return 0
        return (await self.client.count(collection, count_filter=tenant_filter(tenant), exact=True)).count

    async def _request(self, query: SearchQuery) -> models.QueryRequest:
        where = tenant_filter(query.tenant)
        mode = query.mode
        if not await self._is_named(query.collection):
            return models.QueryRequest(query=query.vector, limit=query.limit, with_payload=True, filter=where)
        indices, values = self.words.query(query.text) if mode.uses_sparse else ([], [])
        sparse = models.SparseVector(indices=indices, values=values)
        if not mode.fused:
            vector, using = (query.vector, DENSE_VECTOR) if mode.uses_dense else (sparse, SPARSE_VECTOR)
            return models.QueryRequest(query=vector, using=using, limit=query.limit, with_payload=True, filter=where)
        prefetch = [models.Prefetch(query=query.vector, using=DENSE_VECTOR, limit=query.limit, filter=where),
                    models.Prefetch(query=sparse, using=SPARSE_VECTOR, limit=query.limit, filter=where)]
        fusion = models.RrfQuery(rrf=models.Rrf(k=mode.rrf_k, weights=[mode.dense_weight, mode.sparse_weight]))
        return models.QueryRequest(prefetch=prefetch, query=fusion, limit=query.limit, with_payload=True,
                                   filter=where)

    async def search_many(self, queries: Sequence[SearchQuery]) -> list[list[Chunk] | Exception]:
        """One gRPC batch call per collection."""
        by_collection: dict[str, list[int]] = {}
        for position, query in enumerate(queries):
            by_collection.setdefault(query.collection, []).append(position)
        results: list[list[Chunk] | Exception] = [[] for _ in queries]

        async def one_collection(collection: str, positions: list[int]) -> None:
            try:
                requests = [await self._request(queries[p]) for p in positions]
                answers = await self.client.query_batch_points(collection, requests=requests)
            except Exception as exc:
                for position in positions:
                    results[position] = exc
                return
            for position, answer in zip(positions, answers, strict=True):
                results[position] = [chunk_of(point.payload or {}, point.score) for point in answer.points]

        await asyncio.gather(*(one_collection(name, positions) for name, positions in by_collection.items()))
        return results

    async def bump_version(self, collection: str, tenant: str) -> str:
        await _ensure_plain(self.client, VERSIONS)
        version = str(time.time_ns())
        point = models.PointStruct(id=str(uuid.uuid5(_VERSION_NAMESPACE, f"{collection}\x00{tenant}")), vector=[1.0],
                                   payload={"collection": collection, "tenant": tenant, "version": version})
        await self.client.upsert(VERSIONS, points=[point], wait=True)
        return version

    async def versions(self) -> dict[tuple[str, str], str]:
        if not await self.client.collection_exists(VERSIONS):
            return {}
        points, _ = await self.client.scroll(VERSIONS, limit=100_000, with_payload=True, with_vectors=False)
        return {(p.payload["collection"], p.payload["tenant"]): p.payload["version"] for p in points if p.payload}

    async def aclose(self) -> None:
        await self.client.close()
