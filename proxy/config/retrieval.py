"""Configuration of retrieval and answer reuse: ``retrieval`` and per-tenant opt-ins.

Part of the one frozen ``Config``, kept apart because it is its own feature.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from policies.retrieval.boilerplate import BoilerplateRule
from proxy.config.frozen import Frozen as _Frozen


class RetrievalConfig(_Frozen):
    """Where chunks live and how text is embedded; tenants opt in with ``tenants.<name>.retrieval``."""

    qdrant_url: str | None = None
    """a Qdrant server, e.g. `http://qdrant:6333` (gRPC preferred); none: Qdrant's engine embedded in each process, its
    files under `data_dir` (several workers and `prefixgate ingest` share them)"""
    qdrant_grpc_port: int = Field(6334, ge=1, le=65535)
    """the server's gRPC port (`qdrant_url` names its REST port)"""
    qdrant_path: str | None = None
    """the embedded engine's folder; none: `<data_dir>/qdrant`"""
    timeout: float = Field(5.0, gt=0)
    """seconds for each Qdrant or embedding call"""
    embeddings_url: str | None = None
    """an OpenAI-compatible `/v1` base URL (e.g. a vLLM pooling pool); none: all-MiniLM-L6-v2 in process (`pip install
    'prefixgate[retrieval]'`)"""
    embeddings_model: str = "all-MiniLM-L6-v2"
    """the model name sent to `embeddings_url`"""
    embeddings_dimensions: int = Field(384, ge=1)
    """the embedding vector's size"""
    batch_max: int = Field(32, ge=1)
    """micro-batch: most questions per embedding call"""
    batch_wait_ms: float = Field(0.0, ge=0)
    """micro-batch: how long a question waits for company when the embedder is idle; 0: go at once, and batch while it
    is busy"""
    embedding_cache_size: int = Field(4096, ge=0)
    """question vectors kept per gateway process (least recently used go first; about 1.6 KB each at 384 dimensions),
    per tenant and exact question; 0: off"""
    cache: bool = True
    """cache the selected passages per tenant and normalized question"""
    cache_ttl_s: float = Field(300.0, gt=0)
    """seconds a cached selection is reused, with +-10 % random jitter"""
    cache_empty_ttl_s: float = Field(30.0, gt=0)
    """the same for a question that found no passages (retried sooner)"""
    version_poll_s: float = Field(2.0, gt=0)
    """how often gateways look for ingests that changed a collection: they then search the new chunks, and cached
    retrievals from before are not read again"""
    chunk_tokens: int = Field(200, ge=8)
    """ingestion: chunk size in the embedding model's tokens (MiniLM reads at most 256)"""
    chunk_overlap: int = Field(32, ge=0)
    """ingestion: tokens each chunk repeats from the one before (less than `chunk_tokens`)"""

    boilerplate: bool = True
    """ingestion: leave out of the embedded and indexed text the paragraphs (headers, footers, navigation) that many of
    the tenant's documents in the collection repeat word for word"""
    boilerplate_min_documents: int = Field(3, ge=2)
    """ingestion: a paragraph is boilerplate only when at least this many documents hold it"""
    boilerplate_min_share: float = Field(0.3, gt=0, le=1)
    """ingestion: and when at least this share of the collection's documents hold it"""

    def boilerplate_rule(self) -> BoilerplateRule | None:
        if not self.boilerplate:
            return None
        return BoilerplateRule(self.boilerplate_min_documents, self.boilerplate_min_share)

    @model_validator(mode="after")
    def _overlap_fits(self) -> RetrievalConfig:
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError("chunk_overlap must be smaller than chunk_tokens")
        return self


class TenantRetrieval(_Frozen):
    """Context from a tenant's own documents, added before the final user message."""

    collection: str = Field("prefixgate", min_length=1)
    """the Qdrant collection that holds the tenant's chunks (searches are filtered on the tenant)"""
    enabled: bool = True
    """`false` keeps the settings but retrieves nothing"""
    candidates: int = Field(20, ge=1, le=200)
    """hits fetched before selection"""
    top_n: int = Field(5, ge=1)
    """most passages kept"""
    budget_tokens: int = Field(1500, ge=1)
    """most tokens of passages (estimated at 4 characters each)"""
    search: Literal["hybrid", "dense", "bm25"] = "hybrid"
    """how a question meets the chunks: `dense` by meaning (the embedding model), `bm25` by words, `hybrid` both,
    fused by weighted reciprocal rank (the default: on prefixgate's evaluation it ties `dense` on paraphrased
    questions and is below `bm25` on keyword ones, and has the best recall@3 of the three over all questions;
    docs/benchmarks.md)"""
    dense_weight: float = Field(1.0, gt=0)
    """hybrid: the weight of the dense ranking in the fusion"""
    bm25_weight: float = Field(0.1, gt=0)
    """hybrid: the weight of the BM25 ranking (small: words break ties and rescue codes and names, meaning leads)"""
    rrf_k: int = Field(2, ge=1)
    """hybrid: the rank offset of reciprocal rank fusion (a chunk scores weight / (rrf_k + rank) per ranking)"""
    duplicate_similarity: float = Field(0.85, gt=0, le=1)
    """word-shingle similarity, of the passages' text without their headings, at or above which a passage counts as a
    copy of a better one and is dropped"""
    fallback: bool = False
    """when the model times out, is unreachable or has no healthy replica, answer with the passages found (header
    `x-prefixgate-degraded`) instead of a 502/503/504"""


class AnswerCacheConfig(_Frozen):
    """Exact repeats of deterministic requests (temperature 0, one choice, no tools) answered from memory."""

    ttl_s: float = Field(600.0, gt=0)
    """seconds an answer may be reused"""
