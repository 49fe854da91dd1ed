"""What the store remembers of each ingested document: the keys of its paragraphs and its text as read.

Boilerplate belongs to a collection, not to one document: a footer becomes boilerplate once enough of
a tenant's pages carry it, and stops being boilerplate when they are deleted. To keep every stored
document's chunks in step with the collection's boilerplate, ingest must know which paragraphs every
stored document holds, and must be able to chunk an earlier document again without its file.
``DocumentRecords`` keeps one point per (collection, tenant, document) for that, beside the chunks,
confined to one tenant the way ``VectorStore`` confines chunks: a tenant-keyed filter on a server, a
collection of its own per tenant in local mode.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from qdrant_client import models

from policies.boilerplate import document_keys
from proxy.retrieval.vector_store import VectorStore, field_is, index_tenant_key, local_collection_name

RECORDS = "prefixgate_documents"
_NAMESPACE = uuid.UUID("3c1f0a7e-52d4-5b8e-9f60-7d2a41c8e915")
_PAGE = 512


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    doc_id: str
    source: str  # the file's name, shown with its passages
    keys: frozenset[str]  # its paragraphs' keys (policies.boilerplate.document_keys)
    text: str | None = None  # as read; loaded only when the document is chunked again

    @classmethod
    def of(cls, doc_id: str, source: str, text: str) -> DocumentRecord:
        return cls(doc_id, source, document_keys(text), text)


class DocumentRecords:
    def __init__(self, store: VectorStore) -> None:
        self.client = store.client
        self.per_tenant = store.per_tenant_collections

    def _where(self, collection: str, tenant: str) -> tuple[str, models.Filter | None]:
        """The records' collection and the filter that confine them to one tenant's ``collection``."""
        if self.per_tenant:
            return local_collection_name(f"{RECORDS}.{collection}", tenant), None
        return RECORDS, models.Filter(must=[field_is("collection", collection), field_is("tenant", tenant)])

    @staticmethod
    def _id(collection: str, tenant: str, doc_id: str) -> str:
        return str(uuid.uuid5(_NAMESPACE, f"{collection}\x00{tenant}\x00{doc_id}"))

    async def _ensure(self, name: str) -> None:
        if await self.client.collection_exists(name):
            return
        await self.client.create_collection(name, vectors_config=models.VectorParams(size=1,
                                                                                    distance=models.Distance.DOT))
        if not self.per_tenant:
            await index_tenant_key(self.client, name)

    async def load(self, collection: str, tenant: str) -> dict[str, DocumentRecord]:
        """doc_id -> record (without its text) for every document the tenant has in ``collection``."""
        name, selector = self._where(collection, tenant)
        if not await self.client.collection_exists(name):
            return {}
        records: dict[str, DocumentRecord] = {}
        offset: Any = None
        while True:
            points, offset = await self.client.scroll(name, scroll_filter=selector, limit=_PAGE, offset=offset,
                                                      with_payload=["doc_id", "source", "keys"], with_vectors=False)
            for point in points:
                payload = point.payload or {}
                records[payload["doc_id"]] = DocumentRecord(payload["doc_id"], payload.get("source", ""),
                                                            frozenset(payload.get("keys", ())))
            if offset is None:
                return records

    async def text(self, collection: str, tenant: str, doc_id: str) -> str | None:
        name, _ = self._where(collection, tenant)
        if not await self.client.collection_exists(name):
            return None
        points = await self.client.retrieve(name, [self._id(collection, tenant, doc_id)], with_payload=["text"])
        return (points[0].payload or {}).get("text") if points else None

    async def put(self, collection: str, tenant: str, record: DocumentRecord) -> None:
        name, _ = self._where(collection, tenant)
        await self._ensure(name)
        payload = {"collection": collection, "tenant": tenant, "doc_id": record.doc_id, "source": record.source,
                   "keys": sorted(record.keys), "text": record.text}
        point = models.PointStruct(id=self._id(collection, tenant, record.doc_id), vector=[1.0], payload=payload)
        await self.client.upsert(name, points=[point], wait=True)

    async def remove(self, collection: str, tenant: str, doc_id: str) -> None:
        name, _ = self._where(collection, tenant)
        if await self.client.collection_exists(name):
            selector = models.PointIdsList(points=[self._id(collection, tenant, doc_id)])
            await self.client.delete(name, points_selector=selector, wait=True)
