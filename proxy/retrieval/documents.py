"""What the store remembers of each ingested document: the keys of its paragraphs and its text as read.

Boilerplate belongs to a collection, not to one document: a footer becomes boilerplate once enough of
a tenant's pages carry it, and stops being boilerplate when they are deleted. To keep every stored
document's chunks in step with the collection's boilerplate, ingest must know which paragraphs every
stored document holds, and must be able to chunk an earlier document again without its file. Each
vector store keeps one record per (collection, tenant, document) for that, beside the chunks and
confined to one tenant the same way (``DocumentStore``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from policies.retrieval.boilerplate import document_keys

_NAMESPACE = uuid.UUID("3c1f0a7e-52d4-5b8e-9f60-7d2a41c8e915")
RECORD_FIELDS = ["doc_id", "source", "keys"]  # what ``DocumentStore.load`` reads: never the text


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    doc_id: str
    source: str  # the file's name, shown with its passages
    keys: frozenset[str]  # its paragraphs' keys (policies.retrieval.boilerplate.document_keys)
    text: str | None = None  # as read; loaded only when the document is chunked again

    @classmethod
    def of(cls, doc_id: str, source: str, text: str) -> DocumentRecord:
        return cls(doc_id, source, document_keys(text), text)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> DocumentRecord:
        return cls(payload["doc_id"], payload.get("source", ""), frozenset(payload.get("keys", ())))

    def payload(self, collection: str, tenant: str) -> dict[str, Any]:
        return {"collection": collection, "tenant": tenant, "doc_id": self.doc_id, "source": self.source,
                "keys": sorted(self.keys), "text": self.text}


def record_id(collection: str, tenant: str, doc_id: str) -> str:
    """One point ID per (collection, tenant, document), so writing a record again replaces it."""
    return str(uuid.uuid5(_NAMESPACE, f"{collection}\x00{tenant}\x00{doc_id}"))


class DocumentStore(Protocol):
    async def load(self, collection: str, tenant: str) -> dict[str, DocumentRecord]:
        """doc_id -> record (without its text) for every document the tenant has in ``collection``."""

    async def text(self, collection: str, tenant: str, doc_id: str) -> str | None: ...

    async def put(self, collection: str, tenant: str, record: DocumentRecord) -> None: ...

    async def remove(self, collection: str, tenant: str, doc_id: str) -> None: ...
