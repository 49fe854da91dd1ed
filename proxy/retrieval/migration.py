"""Copy the previous embedded store (qdrant-client local mode) into the embedded engine, once.

Local mode kept one collection per (collection, tenant), named ``<collection>--<hash of tenant>``; every
chunk's payload names its tenant, and the records of ingested documents lived in
``prefixgate_documents.<collection>--<hash>``. The copy keeps every chunk's ID, vector and payload, adds
its BM25 vector (from its text), and publishes each collection as one generation: the gateway finds
everything it found before, and hybrid search works at once. The old files are left where they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client.models import VectorParams

from proxy.retrieval.documents import DocumentRecord
from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.vector_store import StoredChunk

_OLD_RECORDS = "prefixgate_documents."
_OLD_VERSIONS = "prefixgate_versions"
_PAGE = 256


@dataclass
class Migrated:
    chunks: int = 0
    documents: int = 0
    pairs: set[tuple[str, str]] = field(default_factory=set)  # (collection, tenant)


def _points(client: QdrantClient, name: str, vectors: bool) -> Iterator[Any]:
    offset: Any = None
    while True:
        points, offset = client.scroll(name, limit=_PAGE, offset=offset, with_payload=True, with_vectors=vectors)
        yield from points
        if offset is None:
            return


def _dimensions(client: QdrantClient, name: str) -> int:
    """The size of the one unnamed dense vector every local-mode collection kept."""
    vectors = client.get_collection(name).config.params.vectors
    if not isinstance(vectors, VectorParams):
        raise ValueError(f"collection {name} has no single unnamed vector to copy: {vectors!r}")
    return vectors.size


def _collection_of(name: str) -> str:
    """``docs--0123abcd`` -> ``docs``: the tenant's hash is the last ``--`` part."""
    return name.rsplit("--", 1)[0]


def _chunk(point: Any) -> StoredChunk:
    p = point.payload or {}
    return StoredChunk(str(point.id), list(point.vector), p["tenant"], p["doc_id"], int(p["chunk_index"]), p["text"],
                       p.get("source", ""), int(p.get("start") or 0), int(p.get("end") or 0))


async def migrate_local_mode(old: Path) -> Migrated:
    """Everything in the local-mode folder ``old`` into the embedded engine's subfolder of it."""
    client = QdrantClient(path=str(old))
    done = Migrated()
    store: EdgeStore | None = None
    try:
        names = [c.name for c in client.get_collections().collections if c.name != _OLD_VERSIONS]
        chunk_names = [name for name in names if not name.startswith(_OLD_RECORDS)]
        dimensions = _dimensions(client, chunk_names[0]) if chunk_names else 1
        store = EdgeStore(old, dimensions)
        for name in chunk_names:
            chunks = [_chunk(point) for point in _points(client, name, vectors=True)]
            collection = _collection_of(name)
            for tenant in sorted({chunk.tenant for chunk in chunks}):
                own = [chunk for chunk in chunks if chunk.tenant == tenant]
                async with store.writing(collection, tenant):  # one generation for the tenant's chunks
                    for first in range(0, len(own), _PAGE):
                        await store.upsert(collection, tenant, own[first:first + _PAGE])
                done.chunks += len(own)
                done.pairs.add((collection, tenant))
        for name in names:
            if not name.startswith(_OLD_RECORDS):
                continue
            payloads = [point.payload or {} for point in _points(client, name, vectors=False)]
            for collection, tenant in sorted({(p["collection"], p["tenant"]) for p in payloads}):
                async with store.writing(collection, tenant):
                    for p in payloads:
                        if (p["collection"], p["tenant"]) == (collection, tenant):
                            record = DocumentRecord(p["doc_id"], p.get("source", ""), frozenset(p.get("keys", ())),
                                                    p.get("text"))
                            await store.records.put(collection, tenant, record)
                            done.documents += 1
    finally:
        client.close()
        if store is not None:
            await store.aclose()
    return done
