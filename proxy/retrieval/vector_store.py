"""Chunks in Qdrant: embedded local mode (a folder) by default, a Qdrant server by URL.

No query can return, or remove, another tenant's chunk, whatever collection tenants share:
  * on a server, every point carries its tenant in the payload, indexed as Qdrant's tenant key, and
    every search, count and delete filters on it (Qdrant's recommended multitenancy);
  * in local mode each (collection, tenant) is a collection of its own, because local mode checks
    a payload filter in Python point by point (about 20 us a point, every tenant's points included,
    measured): a tenant filter made each search cost grow with the whole collection.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from qdrant_client import AsyncQdrantClient, QdrantClient, models

from policies.evidence import Chunk


@dataclass(frozen=True, slots=True)
class StoredChunk:
    id: str
    vector: list[float]
    tenant: str
    doc_id: str
    index: int
    text: str
    source: str
    start: int
    end: int

    def payload(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "doc_id": self.doc_id, "chunk_index": self.index, "text": self.text,
                "source": self.source, "start": self.start, "end": self.end}


@dataclass(frozen=True, slots=True)
class SearchQuery:
    collection: str
    tenant: str
    vector: list[float]
    limit: int


def _chunks(points: Sequence[models.ScoredPoint]) -> list[Chunk]:
    hits = []
    for point in points:
        payload = point.payload or {}
        hits.append(Chunk(payload["doc_id"], int(payload["chunk_index"]), payload["text"], float(point.score),
                          payload.get("source", ""), payload.get("start"), payload.get("end")))
    return hits


def field_is(key: str, value: str) -> models.FieldCondition:
    """A filter condition: the payload field ``key`` equals ``value``."""
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


async def index_tenant_key(client: AsyncQdrantClient | _OffTheLoop, collection: str) -> None:
    """Index the payload field ``tenant`` as Qdrant's tenant key (a server's collections shared by tenants)."""
    await client.create_payload_index(
        collection, "tenant", field_schema=models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD,
                                                                    is_tenant=True), wait=True)


def local_collection_name(collection: str, tenant: str) -> str:
    """The local-mode collection that holds one tenant's points of ``collection``.

    The tenant is hashed so that any tenant name makes a valid collection name."""
    return f"{collection}--{hashlib.blake2b(tenant.encode(), digest_size=8).hexdigest()}"


class _OffTheLoop:
    """Embedded mode's async client computes in Python on the event loop (about 1.5 ms per search
    over a few dozen points, measured), stalling every other request; this runs the synchronous
    client in one worker thread instead and offers the same awaitable methods."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefixgate-qdrant")

    @property
    def sync(self) -> QdrantClient:
        """The synchronous client, for functions handed to ``run`` (they run in its thread)."""
        return self._client

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """One trip to the client's thread for work that makes many calls."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.get_running_loop().run_in_executor(self._thread, partial(method, *args, **kwargs))

        return call

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._client.close)
        self._thread.shutdown(wait=False)


class StoreInUse(Exception):
    """The embedded store's folder is open in another process (a running gateway, another ingest)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"the embedded Qdrant folder {path} is in use by another process (a running gateway?): "
                         "stop it while ingesting, or point both at a Qdrant server (retrieval.qdrant_url)")


VERSIONS = "prefixgate_versions"  # one point per (collection, tenant): bumped by every ingest or delete
_VERSION_NAMESPACE = uuid.UUID("0b7e4c2a-9d3f-5e1b-8a6c-4f2d7e9b1c30")


class VectorStore:
    def __init__(self, client: AsyncQdrantClient | _OffTheLoop, dimensions: int, *,
                 per_tenant_collections: bool) -> None:
        self.client = client
        self.dimensions = dimensions
        self.per_tenant_collections = per_tenant_collections  # local mode; a server filters on the tenant key

    def _where(self, collection: str, tenant: str, doc_id: str | None = None) -> tuple[str, models.Filter | None]:
        """The physical collection and the filter that confine an operation to one tenant."""
        must = [] if self.per_tenant_collections else [field_is("tenant", tenant)]
        if doc_id is not None:
            must.append(field_is("doc_id", doc_id))
        name = local_collection_name(collection, tenant) if self.per_tenant_collections else collection
        return name, models.Filter(must=must) if must else None

    @classmethod
    def open(cls, *, dimensions: int, path: Path | None = None, url: str | None = None,
             timeout: float = 5.0, grpc_port: int = 6334) -> VectorStore:
        """Local mode holds a file lock: one process at a time may open a folder.

        A server is reached over gRPC on ``grpc_port`` (the URL's port is its REST port, used by
        qdrant-client for its start-up version check).
        """
        if url:
            client = AsyncQdrantClient(url=url, prefer_grpc=True, grpc_port=grpc_port, timeout=int(max(1, timeout)))
            return cls(client, dimensions, per_tenant_collections=False)
        assert path is not None
        path.mkdir(parents=True, exist_ok=True)
        try:
            client = QdrantClient(path=str(path))
        except RuntimeError as error:  # qdrant-client's words for its folder lock
            if "already accessed by another instance" in str(error):
                raise StoreInUse(path) from None
            raise
        return cls(_OffTheLoop(client), dimensions, per_tenant_collections=True)

    async def ensure_collection(self, collection: str, tenant: str) -> None:
        name, _ = self._where(collection, tenant)
        if await self.client.collection_exists(name):
            return
        await self.client.create_collection(
            name, vectors_config=models.VectorParams(size=self.dimensions, distance=models.Distance.COSINE)
        )
        if not self.per_tenant_collections:
            await index_tenant_key(self.client, name)

    async def upsert(self, collection: str, tenant: str, chunks: Sequence[StoredChunk]) -> None:
        if any(c.tenant != tenant for c in chunks):
            raise ValueError(f"every chunk upserted for tenant {tenant!r} must carry that tenant")
        name, _ = self._where(collection, tenant)
        points = [models.PointStruct(id=c.id, vector=c.vector, payload=c.payload()) for c in chunks]
        await self.client.upsert(name, points=points, wait=True)

    async def delete_document(self, collection: str, tenant: str, doc_id: str) -> int:
        """Remove a document's chunks; returns how many there were."""
        name, selector = self._where(collection, tenant, doc_id)
        if not await self.client.collection_exists(name):
            return 0
        assert selector is not None
        count = (await self.client.count(name, count_filter=selector, exact=True)).count
        await self.client.delete(name, points_selector=models.FilterSelector(filter=selector), wait=True)
        return count

    async def count(self, collection: str, tenant: str) -> int:
        name, selector = self._where(collection, tenant)
        if not await self.client.collection_exists(name):
            return 0
        return (await self.client.count(name, count_filter=selector, exact=True)).count

    async def search(self, collection: str, tenant: str, vector: list[float], limit: int) -> list[Chunk]:
        (hits,) = await self.search_many([SearchQuery(collection, tenant, vector, limit)])
        if isinstance(hits, Exception):
            raise hits
        return hits

    async def search_many(self, queries: Sequence[SearchQuery]) -> list[list[Chunk] | Exception]:
        """Several searches at the cost of one round trip: one trip to the local client's thread,
        or one gRPC batch call per collection on a server. A query's failure (a missing
        collection) is returned in its place and leaves the others alone."""
        if isinstance(self.client, _OffTheLoop):
            return await self.client.run(self._search_local, self.client.sync, queries)
        by_collection: dict[str, list[int]] = {}
        for position, query in enumerate(queries):
            by_collection.setdefault(query.collection, []).append(position)
        results: list[list[Chunk] | Exception] = [[] for _ in queries]

        async def one_collection(collection: str, positions: list[int]) -> None:
            requests = [models.QueryRequest(query=queries[p].vector, limit=queries[p].limit, with_payload=True,
                                            filter=self._where(collection, queries[p].tenant)[1]) for p in positions]
            try:
                answers = await self.client.query_batch_points(collection, requests=requests)
            except Exception as exc:
                for position in positions:
                    results[position] = exc
                return
            for position, answer in zip(positions, answers, strict=True):
                results[position] = _chunks(answer.points)

        await asyncio.gather(*(one_collection(name, positions) for name, positions in by_collection.items()))
        return results

    def _search_local(self, client: QdrantClient, queries: Sequence[SearchQuery]) -> list[list[Chunk] | Exception]:
        """Local mode, in the client's thread: each query against its tenant's own collection; a
        query that fails (a missing collection, a vector of the wrong size) fails alone."""
        results: list[list[Chunk] | Exception] = []
        for query in queries:
            name = local_collection_name(query.collection, query.tenant)
            try:
                points = client.query_points(name, query=query.vector, limit=query.limit, with_payload=True).points
            except Exception as exc:
                missing = isinstance(exc, ValueError) and not client.collection_exists(name)
                results.append(self._nothing_for_tenant(client, query.collection) if missing else exc)
                continue
            results.append(_chunks(points))
        return results

    @staticmethod
    def _nothing_for_tenant(client: QdrantClient, collection: str) -> list[Chunk] | Exception:
        """Answer as a server does: a collection that other tenants use holds nothing for this one;
        a collection that nobody uses is an error (most often a misspelt name in the config)."""
        if any(c.name.startswith(f"{collection}--") for c in client.get_collections().collections):
            return []
        return ValueError(f"Collection {collection} not found")

    async def bump_version(self, collection: str, tenant: str) -> str:
        """Mark the tenant's chunks in ``collection`` as changed, so gateways stop reading cached retrievals."""
        if not await self.client.collection_exists(VERSIONS):
            await self.client.create_collection(
                VERSIONS, vectors_config=models.VectorParams(size=1, distance=models.Distance.DOT)
            )
        version = str(time.time_ns())
        point = models.PointStruct(id=str(uuid.uuid5(_VERSION_NAMESPACE, f"{collection}\x00{tenant}")), vector=[1.0],
                                   payload={"collection": collection, "tenant": tenant, "version": version})
        await self.client.upsert(VERSIONS, points=[point], wait=True)
        return version

    async def versions(self) -> dict[tuple[str, str], str]:
        """(collection, tenant) -> version, for every pair ever ingested into."""
        if not await self.client.collection_exists(VERSIONS):
            return {}
        points, _ = await self.client.scroll(VERSIONS, limit=100_000, with_payload=True, with_vectors=False)
        return {(p.payload["collection"], p.payload["tenant"]): p.payload["version"] for p in points if p.payload}

    async def aclose(self) -> None:
        await self.client.close()
