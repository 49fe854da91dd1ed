"""Configuration of retrieval and answer reuse: ``retrieval``, ``redis`` and per-tenant opt-ins.

Part of the one frozen config (proxy/config.py), kept apart because it is its own feature.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from proxy.frozen import Frozen as _Frozen


class RetrievalConfig(_Frozen):
    """Where chunks live and how text is embedded; tenants opt in with ``tenants.<name>.retrieval``."""

    qdrant_url: str | None = None  # a Qdrant server (gRPC preferred); default: embedded, under data_dir
    qdrant_grpc_port: int = Field(6334, ge=1, le=65535)  # the server's gRPC port (qdrant_url names its REST port)
    qdrant_path: str | None = None  # embedded mode's folder; default: <data_dir>/qdrant
    timeout: float = Field(5.0, gt=0)
    embeddings_url: str | None = None  # an OpenAI-compatible /v1 base URL; default: MiniLM in-process
    embeddings_model: str = "all-MiniLM-L6-v2"
    embeddings_dimensions: int = Field(384, ge=1)
    batch_max: int = Field(32, ge=1)  # micro-batch: most questions per embedding call
    batch_wait_ms: float = Field(0.0, ge=0)  # micro-batch: wait for company when the model is idle (0: none)
    cache: bool = True  # cache selected passages per tenant and question
    cache_ttl_s: float = Field(300.0, gt=0)
    cache_empty_ttl_s: float = Field(30.0, gt=0)  # no passages found: retry sooner
    version_poll_s: float = Field(2.0, gt=0)  # how often the gateway looks for ingests that change a collection
    chunk_tokens: int = Field(200, ge=8)  # ingestion: tokens per chunk (MiniLM reads at most 256)
    chunk_overlap: int = Field(32, ge=0)

    @model_validator(mode="after")
    def _overlap_fits(self) -> RetrievalConfig:
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError("chunk_overlap must be smaller than chunk_tokens")
        return self


class TenantRetrieval(_Frozen):
    """Context from a tenant's own documents, added before the final user message."""

    collection: str = Field("prefixgate", min_length=1)
    enabled: bool = True
    candidates: int = Field(20, ge=1, le=200)  # hits fetched before selection
    top_n: int = Field(5, ge=1)
    budget_tokens: int = Field(1500, ge=1)
    duplicate_similarity: float = Field(0.85, gt=0, le=1)
    fallback: bool = False  # model unavailable: answer with the passages (x-prefixgate-degraded) instead of an error


class AnswerCacheConfig(_Frozen):
    """Exact repeats of deterministic requests (temperature 0, one choice, no tools) answered from memory."""

    ttl_s: float = Field(600.0, gt=0)


class RedisConfig(_Frozen):
    """Redis shared by every gateway replica; caches keep a short in-process tier in front of it."""

    url: str = Field(min_length=1, repr=False)  # redis[s]://[:password@]host[:port][/db]
    timeout_ms: float = Field(100.0, gt=0)  # each call; past it the cache counts a miss
    front_ttl_s: float = Field(5.0, gt=0)  # in-process tier: how long a replica reuses what it read
    retry_s: float = Field(2.0, gt=0)  # after a failed call, in-process only for this long

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: str) -> str:
        if not url.startswith(("redis://", "rediss://")):
            # the URL itself stays out of the message: it may hold a password
            raise ValueError("must be a redis:// URL (rediss:// for TLS) such as redis://127.0.0.1:6379/0")
        return url
