"""Document records in the embedded engine: one point (no vector) per tenant's document, in the
collection generation's ``documents`` shard, read and written the way ``EdgeStore`` reads and writes
chunks (this process's ingest under way first, else the published generation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import qdrant_edge as edge

from proxy.retrieval.documents import RECORD_FIELDS, DocumentRecord, record_id
from proxy.retrieval.edge_shards import PAGE, payload_of, tenant_filter

if TYPE_CHECKING:
    from proxy.retrieval.edge_store import EdgeStore


class EdgeRecords:
    """Document records in the collection's second shard, one point (no vector) per tenant's document."""

    def __init__(self, store: EdgeStore) -> None:
        self.store = store

    async def load(self, collection: str, tenant: str) -> dict[str, DocumentRecord]:
        def load() -> dict[str, DocumentRecord]:
            generation = self.store.reading(collection)
            records: dict[str, DocumentRecord] = {}
            if generation is None:
                return records
            offset = None
            where = tenant_filter(tenant)
            while True:
                points, offset = generation.documents.scroll(edge.ScrollRequest(
                    offset=offset, limit=PAGE, filter=where, with_payload=RECORD_FIELDS, with_vector=False))
                for point in points:
                    record = DocumentRecord.from_payload(payload_of(point))
                    records[record.doc_id] = record
                if offset is None:
                    return records

        return dict(await self.store.run(load))

    async def text(self, collection: str, tenant: str, doc_id: str) -> str | None:
        def text() -> str | None:
            generation = self.store.reading(collection)
            if generation is None:
                return None
            points = generation.documents.retrieve([record_id(collection, tenant, doc_id)], ["text"], False)
            return payload_of(points[0]).get("text") if points else None

        return await self.store.run(text)

    async def put(self, collection: str, tenant: str, record: DocumentRecord) -> None:
        point = edge.Point(record_id(collection, tenant, record.doc_id), {}, record.payload(collection, tenant))
        upsert = edge.UpdateOperation.upsert_points([point])
        await self.store.write(collection, tenant, lambda generation: generation.documents.update(upsert))

    async def remove(self, collection: str, tenant: str, doc_id: str) -> None:
        if not self.store.holds(collection):
            return
        delete = edge.UpdateOperation.delete_points([record_id(collection, tenant, doc_id)])
        await self.store.write(collection, tenant, lambda generation: generation.documents.update(delete))

