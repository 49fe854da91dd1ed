"""Ingest: a tenant's documents -> boilerplate left out -> token-bounded chunks -> embeddings -> Qdrant.

Chunk IDs come from tenant, document and position (``policies.retrieval.chunking.chunk_id``), and a document's
old chunks are removed before its new ones go in, so ingesting again replaces: no duplicates, and no
stale tail when a document got shorter.

Boilerplate (``policies.retrieval.boilerplate``) is judged over the tenant's whole collection: the documents
stored before and this run's together. When a run, or a removal, changes which paragraphs are
boilerplate, the stored documents holding one of them are chunked again from their recorded text
(``VectorStore.records``), so every document follows the same rule whatever order the documents came in.
Left out of every page, boilerplate is still kept once: one document of its own (``SHARED_ID``) holds
each repeated paragraph, so the support address in a footer stays findable.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

from policies.retrieval.boilerplate import (
    DEFAULT_RULE,
    BoilerplateRule,
    count_documents,
    keyed_paragraphs,
    repeated_keys,
    without_boilerplate,
)
from policies.retrieval.chunking import chunk_id, chunk_spans
from proxy.retrieval.documents import DocumentRecord
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.reading import UnreadableDocument, document_id, find_documents, read_document
from proxy.retrieval.vector_store import StoredChunk, VectorStore

EMBED_BATCH = 64
SHARED_ID = ":repeated-paragraphs:"  # the document that holds one copy of the collection's boilerplate
SHARED_SOURCE = "paragraphs repeated across documents"
_WORDISH = re.compile(r"\s*\S+")


def tokenizer_offsets(embedder: Embedder) -> Callable[[str], list[int]]:
    """Token end offsets in the embedding model's own tokens when it has a tokenizer, else words."""
    tokenizer = getattr(embedder, "tokenizer", None)
    if tokenizer is None:
        return lambda text: [match.end() for match in _WORDISH.finditer(text)]

    def offsets(text: str) -> list[int]:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [end for _, end in encoded["offset_mapping"]]

    return offsets


@dataclass
class IngestReport:
    documents: int = 0
    chunks: int = 0
    replaced: int = 0  # chunks of earlier versions removed first
    skipped: list[str] = field(default_factory=list)  # why each unreadable document was left out
    seconds: float = 0.0  # from the first document read to the last chunk stored
    boilerplate: int = 0  # paragraphs the collection repeats so often that they are left out
    rechunked: int = 0  # documents stored earlier, chunked again because what is boilerplate changed

    def rates(self) -> str:
        """Documents and chunks per second, as the final line and the progress bar show them."""
        seconds = max(self.seconds, 1e-9)
        return f"{self.documents / seconds:.1f} documents/s, {self.chunks / seconds:.1f} chunks/s"


def boilerplate_of(records: Iterable[DocumentRecord], rule: BoilerplateRule | None) -> frozenset[str]:
    """The paragraph keys that are boilerplate in a collection of these documents (none without a rule)."""
    if rule is None:
        return frozenset()
    records = list(records)
    return repeated_keys(count_documents(record.keys for record in records), len(records), rule)


class Ingestion:
    """One tenant's collection, as ingest and removal change it."""

    def __init__(self, store: VectorStore, embedder: Embedder, *, collection: str, tenant: str,
                 chunk_tokens: int, chunk_overlap: int, boilerplate: BoilerplateRule | None) -> None:
        self.store = store
        self.records = store.records
        self.embedder = embedder
        self.collection = collection
        self.tenant = tenant
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.rule = boilerplate
        self.offsets = tokenizer_offsets(embedder)

    async def add(self, paths: Sequence[str], *, progress: bool = True) -> IngestReport:
        """Ingest the documents under ``paths``, replacing earlier versions of the same documents.

        The run's changes become visible together when it ends (``VectorStore.writing``)."""
        async with self.store.writing(self.collection, self.tenant):
            return await self._add(paths, progress)

    async def _add(self, paths: Sequence[str], progress: bool) -> IngestReport:
        await self.store.ensure_collection(self.collection, self.tenant)
        report, started = IngestReport(), time.monotonic()
        stored = await self.records.load(self.collection, self.tenant)
        stored.pop(SHARED_ID, None)
        fresh: dict[str, DocumentRecord] = {}
        for path in find_documents(paths):
            try:
                text = read_document(path)
            except UnreadableDocument as error:
                report.skipped.append(str(error))
                continue
            fresh[document_id(path)] = DocumentRecord.of(document_id(path), path.name, text)
        before = boilerplate_of(stored.values(), self.rule)
        after = boilerplate_of({**stored, **fresh}.values(), self.rule)
        bar = tqdm(fresh.values(), desc="ingest", unit="doc", disable=not progress)
        for record in bar:
            replaced, chunks = await self._store(record, after)
            report.replaced += replaced
            report.documents += 1
            report.chunks += chunks
            report.seconds = time.monotonic() - started
            bar.set_postfix_str(f"{report.chunks / max(report.seconds, 1e-9):.1f} chunks/s", refresh=False)
        bar.close()
        others = {doc_id: record for doc_id, record in stored.items() if doc_id not in fresh}
        report.rechunked = await self._follow(others, before ^ after, after)
        await self._share(after, [record.text for record in fresh.values()], others)
        report.boilerplate = len(after)
        report.seconds = time.monotonic() - started
        return report

    async def remove(self, doc_id: str) -> int:
        """Remove a document; returns how many chunks it had."""
        async with self.store.writing(self.collection, self.tenant):
            return await self._remove(doc_id)

    async def _remove(self, doc_id: str) -> int:
        stored = await self.records.load(self.collection, self.tenant)
        stored.pop(SHARED_ID, None)
        removed = await self.store.delete_document(self.collection, self.tenant, doc_id)
        await self.records.remove(self.collection, self.tenant, doc_id)
        if doc_id in stored:
            before = boilerplate_of(stored.values(), self.rule)
            del stored[doc_id]
            after = boilerplate_of(stored.values(), self.rule)
            await self._follow(stored, before ^ after, after)
            await self._share(after, [], stored)
        return removed

    async def _store(self, record: DocumentRecord, boilerplate: frozenset[str]) -> tuple[int, int]:
        """Replace a document's chunks; returns (chunks removed, chunks stored)."""
        assert record.text is not None
        text = without_boilerplate(record.text, boilerplate)
        spans = chunk_spans(text, self.offsets(text), self.chunk_tokens, self.chunk_overlap)
        replaced = await self.store.delete_document(self.collection, self.tenant, record.doc_id)
        for first in range(0, len(spans), EMBED_BATCH):
            batch = spans[first:first + EMBED_BATCH]
            vectors = await self.embedder.embed([text[start:end] for start, end in batch])
            await self.store.upsert(self.collection, self.tenant, [
                StoredChunk(chunk_id(self.tenant, record.doc_id, first + i), vector, self.tenant, record.doc_id,
                            first + i, text[start:end], record.source, start, end)
                for i, ((start, end), vector) in enumerate(zip(batch, vectors, strict=True))
            ])
        await self.records.put(self.collection, self.tenant, record)
        return replaced, len(spans)

    async def _follow(self, stored: dict[str, DocumentRecord], changed: frozenset[str],
                      boilerplate: frozenset[str]) -> int:
        """Chunk again the stored documents that hold a paragraph whose boilerplate status changed."""
        again = 0
        for record in stored.values():
            if not record.keys & changed:
                continue
            text = await self.records.text(self.collection, self.tenant, record.doc_id)
            if text is not None:
                await self._store(DocumentRecord(record.doc_id, record.source, record.keys, text), boilerplate)
                again += 1
        return again

    async def _share(self, boilerplate: frozenset[str], texts: list[str | None],
                     stored: dict[str, DocumentRecord]) -> None:
        """Store one copy of each boilerplate paragraph as the document ``SHARED_ID``, in a stable order
        (the copy stored before first, then as found), or remove it when there is no boilerplate."""
        previous = await self.records.text(self.collection, self.tenant, SHARED_ID)
        if not boilerplate:
            if previous is not None:
                await self.store.delete_document(self.collection, self.tenant, SHARED_ID)
                await self.records.remove(self.collection, self.tenant, SHARED_ID)
            return
        found: dict[str, str] = {}

        def take(text: str | None) -> None:
            for key, paragraph in keyed_paragraphs(text or "").items():
                if key in boilerplate:
                    found.setdefault(key, paragraph)

        for text in [previous, *texts]:
            take(text)
        for record in stored.values():
            if record.keys & (boilerplate - found.keys()):
                take(await self.records.text(self.collection, self.tenant, record.doc_id))
        shared = "\n\n".join(found.values())
        if shared != previous:
            await self._store(DocumentRecord(SHARED_ID, SHARED_SOURCE, frozenset(), shared), frozenset())


async def ingest(
    paths: Sequence[str], *, tenant: str, collection: str, embedder: Embedder, store: VectorStore,
    chunk_tokens: int, chunk_overlap: int, progress: bool = True,
    boilerplate: BoilerplateRule | None = DEFAULT_RULE,
) -> IngestReport:
    """Add the documents under ``paths`` to the tenant's ``collection`` (see ``Ingestion``)."""
    ingestion = Ingestion(store, embedder, collection=collection, tenant=tenant, chunk_tokens=chunk_tokens,
                          chunk_overlap=chunk_overlap, boilerplate=boilerplate)
    return await ingestion.add(paths, progress=progress)
