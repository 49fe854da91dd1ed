"""Chunks in Qdrant: embedded local mode (a folder) by default, a Qdrant server by URL.

Every point carries its tenant in the payload and every search and delete filters on it, so no
query can return, or remove, another tenant's chunk, whatever collection tenants share.
"""

from __future__ import annotations

import asyncio
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


def _tenant_filter(tenant: str, doc_id: str | None = None) -> models.Filter:
    must = [models.FieldCondition(key="tenant", match=models.MatchValue(value=tenant))]
    if doc_id is not None:
        must.append(models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id)))
    return models.Filter(must=must)


class _OffTheLoop:
    """Embedded mode's async client computes in Python on the event loop (about 1.5 ms per search
    over a few dozen points, measured), stalling every other request; this runs the synchronous
    client in one worker thread instead and offers the same awaitable methods."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefixgate-qdrant")

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.get_running_loop().run_in_executor(self._thread, partial(method, *args, **kwargs))

        return call

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._client.close)
        self._thread.shutdown(wait=False)


VERSIONS = "prefixgate_versions"  # one point per (collection, tenant): bumped by every ingest or delete
_VERSION_NAMESPACE = uuid.UUID("0b7e4c2a-9d3f-5e1b-8a6c-4f2d7e9b1c30")


class VectorStore:
    def __init__(self, client: AsyncQdrantClient | _OffTheLoop, dimensions: int) -> None:
        self.client = client
        self.dimensions = dimensions

    @classmethod
    def open(cls, *, dimensions: int, path: Path | None = None, url: str | None = None,
             timeout: float = 5.0, grpc_port: int = 6334) -> VectorStore:
        """Local mode holds a file lock: one process at a time may open a folder.

        A server is reached over gRPC on ``grpc_port`` (the URL's port is its REST port, used by
        qdrant-client for its start-up version check).
        """
        if url:
            client = AsyncQdrantClient(url=url, prefer_grpc=True, grpc_port=grpc_port, timeout=int(max(1, timeout)))
            return cls(client, dimensions)
        assert path is not None
        path.mkdir(parents=True, exist_ok=True)
        return cls(_OffTheLoop(QdrantClient(path=str(path))), dimensions)

    async def ensure_collection(self, name: str) -> None:
        if not await self.client.collection_exists(name):
            await self.client.create_collection(
                name, vectors_config=models.VectorParams(size=self.dimensions, distance=models.Distance.COSINE)
            )

    async def upsert(self, collection: str, chunks: Sequence[StoredChunk]) -> None:
        points = [models.PointStruct(id=c.id, vector=c.vector, payload=c.payload()) for c in chunks]
        await self.client.upsert(collection, points=points, wait=True)

    async def delete_document(self, collection: str, tenant: str, doc_id: str) -> int:
        """Remove a document's chunks; returns how many there were."""
        if not await self.client.collection_exists(collection):
            return 0
        selector = _tenant_filter(tenant, doc_id)
        count = (await self.client.count(collection, count_filter=selector, exact=True)).count
        await self.client.delete(collection, points_selector=models.FilterSelector(filter=selector), wait=True)
        return count

    async def count(self, collection: str, tenant: str) -> int:
        if not await self.client.collection_exists(collection):
            return 0
        return (await self.client.count(collection, count_filter=_tenant_filter(tenant), exact=True)).count

    async def search(self, collection: str, tenant: str, vector: list[float], limit: int) -> list[Chunk]:
        result = await self.client.query_points(
            collection, query=vector, query_filter=_tenant_filter(tenant), limit=limit, with_payload=True
        )
        hits = []
        for point in result.points:
            payload = point.payload or {}
            hits.append(Chunk(payload["doc_id"], int(payload["chunk_index"]), payload["text"], float(point.score),
                              payload.get("source", ""), payload.get("start"), payload.get("end")))
        return hits

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
