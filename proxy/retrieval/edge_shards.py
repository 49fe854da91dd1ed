"""The embedded engine's files for one collection generation: its two shards, their layout and queries.

A generation folder holds ``chunks`` (every tenant's chunks: a dense and a BM25 vector each, the tenant
as a tenant key, one HNSW graph per tenant), ``documents`` (the ingest records, no vectors) and
``manifest.json`` (the collection's name, vector size and per-tenant versions). ``EdgeStore`` opens
them; this module only knows their shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import qdrant_edge as edge

from proxy.retrieval.vector_store import DENSE_VECTOR, SPARSE_VECTOR, SearchQuery, WordVectors

MANIFEST = "manifest.json"
PAGE = 512
# Qdrant's multitenancy layout, tuned on the store-scale benchmark: no graph over all tenants (m=0), a
# denser graph per tenant (payload_m 32, ef_construct 200) for recall; one search thread, because on a
# small machine a hand-off per search costs more than it saves.
HNSW = edge.HnswIndexConfig(m=0, ef_construct=200, full_scan_threshold=10_000, payload_m=32)
# Dense vectors also kept as int8 in memory: the graph walk compares those, then the best twice-as-many
# candidates are rescored on the full vectors. Measured at 100k chunks: the same top-20 overlap with the
# exact search (0.984 against 0.983), a faster tail, and the graphs built in less than half the time.
QUANTIZED = edge.ScalarQuantizationConfig(edge.ScalarType.Int8, always_ram=True)
DENSE_SEARCH = edge.SearchParams(quantization=edge.QuantizationSearchParams(rescore=True, oversampling=2.0))


def tenant_filter(tenant: str, **fields: str) -> edge.Filter:
    """Every read and delete goes through this: the tenant's own points, and of them those matching ``fields``."""
    conditions: list[edge.ConditionType] = [edge.FieldCondition(key="tenant", match=edge.MatchValue(tenant))]
    conditions += [edge.FieldCondition(key=key, match=edge.MatchValue(value)) for key, value in fields.items()]
    return edge.Filter(must=conditions)


def payload_of(point: edge.ScoredPoint | edge.Record) -> dict[str, Any]:
    """The payload of a point read with its payload asked for (the engine types it optional for reads without)."""
    if point.payload is None:
        raise ValueError(f"point {point.id} came back without the payload it was read with")
    return point.payload


@dataclass
class Generation:
    """The open shards of one generation folder."""

    path: Path
    chunks: edge.EdgeShard
    documents: edge.EdgeShard
    manifest: dict[str, Any]

    def close(self) -> None:
        self.chunks.close()
        self.documents.close()


def load_generation(path: Path) -> Generation:
    manifest = json.loads((path / MANIFEST).read_text())
    return Generation(path, edge.EdgeShard.load(str(path / "chunks")), edge.EdgeShard.load(str(path / "documents")),
                      manifest)


def create_generation(path: Path, collection: str, dimensions: int) -> Generation:
    """The first generation of a collection; the manifest is written when it is published."""
    vectors = {DENSE_VECTOR: edge.EdgeVectorParams(size=dimensions, distance=edge.Distance.Cosine,
                                                   quantization_config=QUANTIZED)}
    sparse = {SPARSE_VECTOR: edge.EdgeSparseVectorParams(modifier=edge.Modifier.Idf)}
    chunks = edge.EdgeShard.create(str(path / "chunks"), edge.EdgeConfig(
        vectors=vectors, sparse_vectors=sparse, hnsw_config=HNSW, max_search_threads=1, wal_enabled=False))
    chunks.update(edge.UpdateOperation.create_field_index("tenant", edge.KeywordIndexParams(is_tenant=True)))
    chunks.update(edge.UpdateOperation.create_field_index("doc_id", edge.KeywordIndexParams()))
    documents = edge.EdgeShard.create(str(path / "documents"), edge.EdgeConfig(
        vectors={"none": edge.EdgeVectorParams(size=1, distance=edge.Distance.Dot)}, wal_enabled=False))
    documents.update(edge.UpdateOperation.create_field_index("tenant", edge.KeywordIndexParams(is_tenant=True)))
    return Generation(path, chunks, documents, {"collection": collection, "dimensions": dimensions, "versions": {}})


def search_request(query: SearchQuery, words: WordVectors) -> edge.QueryRequest | None:
    """The engine's request for one question in its tenant's chunks; None when it can find nothing (a BM25-only
    search for a question with no indexable word). A hybrid search whose question has no such word is dense."""
    where = tenant_filter(query.tenant)
    mode = query.mode
    dense = edge.Query.Nearest(query.vector, using=DENSE_VECTOR)
    indices, values = words.query(query.text) if mode.uses_sparse else ([], [])
    sparse = edge.Query.Nearest(edge.SparseVector(indices, values), using=SPARSE_VECTOR) if indices else None
    if mode.fused and sparse is not None:
        prefetches = [edge.Prefetch(query.limit, query=dense, filter=where, params=DENSE_SEARCH),
                      edge.Prefetch(query.limit, query=sparse, filter=where)]
        fusion = edge.Fusion.Rrf(mode.rrf_k, weights=[mode.dense_weight, mode.sparse_weight])
        # the engine's stub names the outer Fusion class where it takes Fusion.Rrf (or Fusion.Dbsf)
        return edge.QueryRequest(query.limit, prefetches=prefetches, query=fusion,  # type: ignore[arg-type]  # stub
                                 with_payload=True)
    if mode.uses_dense:
        return edge.QueryRequest(query.limit, query=dense, filter=where, with_payload=True, params=DENSE_SEARCH)
    if sparse is None:
        return None
    return edge.QueryRequest(query.limit, query=sparse, filter=where, with_payload=True)
