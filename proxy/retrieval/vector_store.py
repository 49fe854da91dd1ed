"""What every vector store offers the retriever and ingest, whichever engine holds the chunks.

Two engines, one query shape (``SearchQuery``: a dense vector, the question's words, a ``SearchMode``):
``EdgeStore`` (Qdrant's engine in this process, under a folder; the default) and ``ServerStore`` (a Qdrant
server by URL). Both keep a dense vector ("dense") and a BM25 sparse vector ("bm25", its IDF kept by the
engine) per chunk, so a tenant can search by meaning, by words, or both fused by weighted reciprocal rank.

No query can return, or remove, another tenant's chunk, whatever collection tenants share: every point
carries its tenant in the payload, indexed as Qdrant's tenant key, and every search, count and delete
filters on it (Qdrant's recommended multitenancy).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from policies.retrieval.evidence import Chunk
from proxy.retrieval.documents import DocumentStore

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "bm25"


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
class SearchMode:
    """How a question meets the chunks: by meaning (dense), by words (BM25), or both fused by weighted
    reciprocal rank fusion (a chunk scores the sum over the two rankings of weight / (rrf_k + rank))."""

    dense_weight: float = 1.0
    sparse_weight: float = 0.0
    rrf_k: int = 2

    @property
    def uses_dense(self) -> bool:
        return self.dense_weight > 0

    @property
    def uses_sparse(self) -> bool:
        return self.sparse_weight > 0

    @property
    def fused(self) -> bool:
        return self.uses_dense and self.uses_sparse


DENSE = SearchMode()


@dataclass(frozen=True, slots=True)
class SearchQuery:
    collection: str
    tenant: str
    vector: list[float]
    limit: int
    text: str = ""  # the question, for the BM25 side
    mode: SearchMode = DENSE


class WordVectors:
    """BM25 sparse vectors, made by the same Rust tokenizer (``qdrant_edge.Bm25``) for chunks at ingest and
    for questions at search, on either engine. Documents carry term-frequency weights; the engine applies
    each term's IDF over the collection at query time, so weights stay right as the collection grows."""

    def __init__(self) -> None:
        from qdrant_edge import Bm25  # here, not at the top: a gateway with no collections never loads the engine

        self._bm25 = Bm25()

    def document(self, text: str) -> tuple[list[int], list[float]]:
        vector = self._bm25.embed_document(text)
        return list(vector.indices), list(vector.values)

    def query(self, text: str) -> tuple[list[int], list[float]]:
        vector = self._bm25.embed_query(text)
        return list(vector.indices), list(vector.values)


def chunk_of(payload: dict[str, Any], score: float) -> Chunk:
    return Chunk(payload["doc_id"], int(payload["chunk_index"]), payload["text"], float(score),
                 payload.get("source", ""), payload.get("start"), payload.get("end"))


class MissingCollection(ValueError):
    """No tenant has anything in the collection: most often a misspelt name in the config."""

    def __init__(self, collection: str) -> None:
        super().__init__(f"Collection {collection} not found")


class VectorStore(ABC):
    """The chunks of every tenant's collections, and the records ingest keeps beside them."""

    dimensions: int
    records: DocumentStore

    @abstractmethod
    async def ensure_collection(self, collection: str, tenant: str) -> None: ...

    @abstractmethod
    def writing(self, collection: str, tenant: str) -> AbstractAsyncContextManager[None]:
        """One ingest's changes to a tenant's collection, made visible together when it ends, with the
        collection's version bumped so gateways stop reading cached retrievals of it."""

    @abstractmethod
    async def upsert(self, collection: str, tenant: str, chunks: Sequence[StoredChunk]) -> None: ...

    @abstractmethod
    async def delete_document(self, collection: str, tenant: str, doc_id: str) -> int:
        """Remove a document's chunks; returns how many there were."""

    @abstractmethod
    async def count(self, collection: str, tenant: str) -> int: ...

    @abstractmethod
    async def search_many(self, queries: Sequence[SearchQuery]) -> list[list[Chunk] | Exception]:
        """Several searches at the cost of one: a query's failure (a missing collection) is returned in
        its place and leaves the others alone; a tenant with nothing in a used collection gets []."""

    @abstractmethod
    async def versions(self) -> dict[tuple[str, str], str]:
        """(collection, tenant) -> version, for every pair ever written to; also how a gateway learns of
        an ingest made by another process."""

    @abstractmethod
    async def aclose(self) -> None: ...

    async def search(self, collection: str, tenant: str, vector: list[float], limit: int, *, text: str = "",
                     mode: SearchMode = DENSE) -> list[Chunk]:
        (hits,) = await self.search_many([SearchQuery(collection, tenant, vector, limit, text, mode)])
        if isinstance(hits, Exception):
            raise hits
        return hits

    @staticmethod
    def check_tenant(tenant: str, chunks: Sequence[StoredChunk]) -> None:
        if any(c.tenant != tenant for c in chunks):
            raise ValueError(f"every chunk upserted for tenant {tenant!r} must carry that tenant")
