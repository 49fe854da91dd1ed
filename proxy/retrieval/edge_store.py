"""The embedded default: chunks in Qdrant's own engine (``qdrant_edge``) inside this process, under a folder.

One shard per collection holds every tenant's chunks, with the tenant as an indexed tenant key, one HNSW
graph per tenant, a dense and a BM25 vector per chunk; a second shard holds the document records.
Qdrant's engine runs the search (HNSW, payload index, IDF, fusion) in Rust: at 100k chunks a filtered
search takes under 2 ms on two cores, where the previous embedded store (qdrant-client's local mode)
scanned every point in Python (docs/benchmarks.md).

An engine belongs to the process that opens it, so collections live as ``Generations``: each gateway
worker reads the published generation and picks up a newer one when it polls ``versions``; an ingest,
in any process, writes a copy and publishes it when it ends. Ingest therefore runs beside live
gateways, two ingests of one collection take turns, and a killed ingest changes nothing.

Every engine call runs in one worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as edge

from policies.evidence import Chunk
from proxy.retrieval.documents import RECORD_FIELDS, DocumentRecord, record_id
from proxy.retrieval.generations import CURRENT, Generations, folder_name
from proxy.retrieval.vector_store import (
    DENSE_VECTOR,
    SPARSE_VECTOR,
    MissingCollection,
    SearchQuery,
    StoredChunk,
    VectorStore,
    WordVectors,
    chunk_of,
)

MANIFEST = "manifest.json"
_PAGE = 512
# Qdrant's multitenancy layout, tuned on the store-scale benchmark: no graph over all tenants (m=0), a
# denser graph per tenant (payload_m 32, ef_construct 200) for recall; one search thread, because on a
# small machine a hand-off per search costs more than it saves.
_HNSW = edge.HnswIndexConfig(m=0, ef_construct=200, full_scan_threshold=10_000, payload_m=32)


class LocalModeFolder(Exception):
    """The folder holds chunks in the previous embedded store's format (qdrant-client local mode)."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} holds collections of the previous embedded store (qdrant-client local mode), which this "
            f"version no longer reads: run `prefixgate migrate-store` once to copy them to the embedded engine "
            f"(the old files stay until you delete them)")


def holds_local_mode(path: Path) -> bool:
    """True where ``path`` has local-mode collections and no embedded-engine folder yet."""
    collections = path / "collection"
    return ((path / "meta.json").is_file() and collections.is_dir() and any(collections.iterdir())
            and not (path / "edge").is_dir())


def _where(tenant: str, **fields: str) -> edge.Filter:
    conditions = [edge.FieldCondition(key="tenant", match=edge.MatchValue(tenant))]
    conditions += [edge.FieldCondition(key=key, match=edge.MatchValue(value)) for key, value in fields.items()]
    return edge.Filter(must=conditions)


@dataclass
class _Generation:
    """The open shards of one generation folder."""

    path: Path
    chunks: edge.EdgeShard
    documents: edge.EdgeShard
    manifest: dict[str, Any]

    def close(self) -> None:
        self.chunks.close()
        self.documents.close()


@dataclass
class _Writer:
    generations: Generations
    generation: _Generation
    tenants: set[str] = field(default_factory=set)


class EdgeStore(VectorStore):
    def __init__(self, path: Path, dimensions: int) -> None:
        self.path = path
        self.root = path / "edge"
        self.dimensions = dimensions
        self.words = WordVectors()
        self.records = EdgeRecords(self)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefixgate-qdrant")
        self._readers: dict[str, _Generation] = {}  # collection -> the published generation this process reads
        self._writers: dict[str, _Writer] = {}  # collection -> this process's ingest under way

    @classmethod
    def open(cls, path: Path, *, dimensions: int) -> EdgeStore:
        if holds_local_mode(path):
            raise LocalModeFolder(path)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path, dimensions)

    async def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    def _generations(self, collection: str) -> Generations:
        return Generations(self.root / folder_name(collection))

    # -- opening generations (in the engine's thread, or a side thread for loads) --

    def _load(self, path: Path) -> _Generation:
        manifest = json.loads((path / MANIFEST).read_text())
        return _Generation(path, edge.EdgeShard.load(str(path / "chunks")),
                           edge.EdgeShard.load(str(path / "documents")), manifest)

    def _create(self, path: Path, collection: str) -> _Generation:
        vectors = {DENSE_VECTOR: edge.EdgeVectorParams(size=self.dimensions, distance=edge.Distance.Cosine)}
        sparse = {SPARSE_VECTOR: edge.EdgeSparseVectorParams(modifier=edge.Modifier.Idf)}
        chunks = edge.EdgeShard.create(str(path / "chunks"), edge.EdgeConfig(
            vectors=vectors, sparse_vectors=sparse, hnsw_config=_HNSW, max_search_threads=1, wal_enabled=False))
        chunks.update(edge.UpdateOperation.create_field_index("tenant", edge.KeywordIndexParams(is_tenant=True)))
        chunks.update(edge.UpdateOperation.create_field_index("doc_id", edge.KeywordIndexParams()))
        documents = edge.EdgeShard.create(str(path / "documents"), edge.EdgeConfig(
            vectors={"none": edge.EdgeVectorParams(size=1, distance=edge.Distance.Dot)}, wal_enabled=False))
        documents.update(edge.UpdateOperation.create_field_index("tenant", edge.KeywordIndexParams(is_tenant=True)))
        manifest = {"collection": collection, "dimensions": self.dimensions, "versions": {}}
        return _Generation(path, chunks, documents, manifest)

    def _reading(self, collection: str) -> _Generation | None:
        """The generation a read uses: this process's own ingest under way, else the published one."""
        writer = self._writers.get(collection)
        if writer is not None:
            return writer.generation
        reader = self._readers.get(collection)
        if reader is None:
            current = self._generations(collection).current()
            if current is None:
                return None
            reader = self._readers[collection] = self._load(current)
        return reader

    # -- writing --

    @asynccontextmanager
    async def writing(self, collection: str, tenant: str) -> AsyncIterator[None]:
        """Changes go to a copy of the collection, published whole when the block ends without error."""
        writer = self._writers.get(collection)
        if writer is not None:  # the ingest's own writes, inside its block
            writer.tenants.add(tenant)
            yield
            return
        generations = self._generations(collection)
        lock = generations.writer_lock()
        await asyncio.to_thread(lock.__enter__)  # may wait for another process's ingest: not in the engine's thread
        try:
            path = await asyncio.to_thread(generations.begin)
            try:
                generation = await self._run(self._open_for_writing, path, collection)
            except BaseException:
                generations.discard(path)
                raise
            self._writers[collection] = _Writer(generations, generation, {tenant})
            try:
                yield
            except BaseException:
                await self._run(self._abandon, collection)
                raise
            await self._run(self._publish, collection)
        finally:
            lock.__exit__(None, None, None)

    def _open_for_writing(self, path: Path, collection: str) -> _Generation:
        if not (path / MANIFEST).is_file():
            return self._create(path, collection)
        generation = self._load(path)
        if self.dimensions and generation.manifest["dimensions"] != self.dimensions:
            generation.close()
            raise ValueError(f"collection {collection} holds {generation.manifest['dimensions']}-wide vectors and "
                             f"the embedder makes {self.dimensions}-wide ones: ingest into another collection")
        return generation

    def _abandon(self, collection: str) -> None:
        writer = self._writers.pop(collection)
        writer.generation.close()
        writer.generations.discard(writer.generation.path)

    def _publish(self, collection: str) -> None:
        writer = self._writers.pop(collection)
        generation = writer.generation
        try:
            generation.chunks.flush()
            generation.chunks.optimize()  # build the per-tenant graphs now, not in a reader
            generation.documents.flush()
        finally:
            generation.close()
        version = str(time.time_ns())
        generation.manifest["versions"].update({tenant: version for tenant in writer.tenants})
        (generation.path / MANIFEST).write_text(json.dumps(generation.manifest))
        # Opening once settles the files (the engine folds its journals on load); readers then never write.
        self._load(generation.path).close()
        writer.generations.publish(generation.path)
        self._swap(collection, self._load(generation.path))

    def _swap(self, collection: str, fresh: _Generation) -> None:
        old = self._readers.get(collection)
        self._readers[collection] = fresh
        if old is not None:
            old.close()

    async def _write(self, collection: str, tenant: str, change: Callable[[_Generation], Any]) -> Any:
        async with self.writing(collection, tenant):
            return await self._run(change, self._writers[collection].generation)

    async def ensure_collection(self, collection: str, tenant: str) -> None:
        if self._generations(collection).current() is None and collection not in self._writers:
            async with self.writing(collection, tenant):
                pass

    async def upsert(self, collection: str, tenant: str, chunks: Sequence[StoredChunk]) -> None:
        self.check_tenant(tenant, chunks)
        points = []
        for chunk in chunks:
            indices, values = self.words.document(chunk.text)
            vectors = {DENSE_VECTOR: chunk.vector, SPARSE_VECTOR: edge.SparseVector(indices, values)}
            points.append(edge.Point(chunk.id, vectors, chunk.payload()))
        await self._write(collection, tenant,
                          lambda generation: generation.chunks.update(edge.UpdateOperation.upsert_points(points)))

    async def delete_document(self, collection: str, tenant: str, doc_id: str) -> int:
        if self._generations(collection).current() is None and collection not in self._writers:
            return 0
        where = _where(tenant, doc_id=doc_id)

        def delete(generation: _Generation) -> int:
            count = generation.chunks.count(edge.CountRequest(exact=True, filter=where))
            if count:
                generation.chunks.update(edge.UpdateOperation.delete_points_by_filter(where))
            return int(count)

        return int(await self._write(collection, tenant, delete))

    async def count(self, collection: str, tenant: str) -> int:
        def count() -> int:
            generation = self._reading(collection)
            if generation is None:
                return 0
            return int(generation.chunks.count(edge.CountRequest(exact=True, filter=_where(tenant))))

        return int(await self._run(count))

    # -- searching --

    def _request(self, query: SearchQuery) -> edge.QueryRequest | None:
        where = _where(query.tenant)
        mode = query.mode
        dense = edge.Query.Nearest(query.vector, using=DENSE_VECTOR)
        indices, values = self.words.query(query.text) if mode.uses_sparse else ([], [])
        sparse = edge.Query.Nearest(edge.SparseVector(indices, values), using=SPARSE_VECTOR) if indices else None
        if mode.fused and sparse is not None:
            prefetches = [edge.Prefetch(query.limit, query=dense, filter=where),
                          edge.Prefetch(query.limit, query=sparse, filter=where)]
            fusion = edge.Fusion.Rrf(mode.rrf_k, weights=[mode.dense_weight, mode.sparse_weight])
            return edge.QueryRequest(query.limit, prefetches=prefetches, query=fusion, with_payload=True)
        if mode.uses_dense:
            return edge.QueryRequest(query.limit, query=dense, filter=where, with_payload=True)
        if sparse is None:  # a BM25-only search for a question with no indexable word finds nothing
            return None
        return edge.QueryRequest(query.limit, query=sparse, filter=where, with_payload=True)

    def _search_collection(self, collection: str, queries: list[SearchQuery]) -> list[list[Chunk] | Exception]:
        generation = self._reading(collection)
        if generation is None:
            return [MissingCollection(collection) for _ in queries]
        requests = [self._request(query) for query in queries]
        asked = [request for request in requests if request is not None]
        try:
            answers = iter(generation.chunks.query_batch(edge.QueryBatchRequest(asked)) if asked else [])
        except Exception:  # one bad query (a vector of the wrong size) fails the batch: ask one by one
            return [self._search_one(generation, request) for request in requests]
        return [[] if request is None else [chunk_of(point.payload, point.score) for point in next(answers)]
                for request in requests]

    @staticmethod
    def _search_one(generation: _Generation, request: edge.QueryRequest | None) -> list[Chunk] | Exception:
        if request is None:
            return []
        try:
            return [chunk_of(point.payload, point.score) for point in generation.chunks.query(request)]
        except Exception as exc:
            return exc

    def _search_all(self, queries: Sequence[SearchQuery]) -> list[list[Chunk] | Exception]:
        by_collection: dict[str, list[int]] = {}
        for position, query in enumerate(queries):
            by_collection.setdefault(query.collection, []).append(position)
        results: list[list[Chunk] | Exception] = [[] for _ in queries]
        for collection, positions in by_collection.items():
            try:
                answers = self._search_collection(collection, [queries[p] for p in positions])
            except Exception as exc:  # a vector of the wrong size, a damaged folder: these queries fail alone
                answers = [exc] * len(positions)
            for position, answer in zip(positions, answers, strict=True):
                results[position] = answer
        return results

    async def search_many(self, queries: Sequence[SearchQuery]) -> list[list[Chunk] | Exception]:
        """One trip to the engine's thread, one planned batch (``query_batch``) per collection."""
        return await self._run(self._search_all, queries)

    # -- versions: how this process learns of another's ingest --

    def _published(self) -> dict[str, Path]:
        """collection -> its published generation, for every collection under the folder."""
        found = {}
        if self.root.is_dir():
            for folder in self.root.iterdir():
                try:
                    name = (folder / CURRENT).read_text().strip()
                    manifest = json.loads((folder / name / MANIFEST).read_text())
                except (FileNotFoundError, NotADirectoryError):
                    continue
                found[manifest["collection"]] = folder / name
        return found

    async def versions(self) -> dict[tuple[str, str], str]:
        """Also moves this process's readers to generations published since they opened."""
        published = await asyncio.to_thread(self._published)
        versions: dict[tuple[str, str], str] = {}
        for collection, path in published.items():
            reader = self._readers.get(collection)
            if reader is not None and reader.path != path:
                fresh = await asyncio.to_thread(self._load, path)
                await self._run(self._swap, collection, fresh)
            manifest = json.loads(await asyncio.to_thread((path / MANIFEST).read_text))
            versions.update({(collection, tenant): version for tenant, version in manifest["versions"].items()})
        return versions

    async def aclose(self) -> None:
        def close_all() -> None:
            for generation in self._readers.values():
                generation.close()
            self._readers.clear()

        await self._run(close_all)
        self._thread.shutdown(wait=False)


class EdgeRecords:
    """Document records in the collection's second shard, one point (no vector) per tenant's document."""

    def __init__(self, store: EdgeStore) -> None:
        self.store = store

    async def load(self, collection: str, tenant: str) -> dict[str, DocumentRecord]:
        def load() -> dict[str, DocumentRecord]:
            generation = self.store._reading(collection)
            records: dict[str, DocumentRecord] = {}
            if generation is None:
                return records
            offset = None
            while True:
                points, offset = generation.documents.scroll(edge.ScrollRequest(
                    offset=offset, limit=_PAGE, filter=_where(tenant), with_payload=RECORD_FIELDS, with_vector=False))
                for point in points:
                    record = DocumentRecord.from_payload(point.payload)
                    records[record.doc_id] = record
                if offset is None:
                    return records

        return dict(await self.store._run(load))

    async def text(self, collection: str, tenant: str, doc_id: str) -> str | None:
        def text() -> str | None:
            generation = self.store._reading(collection)
            if generation is None:
                return None
            points = generation.documents.retrieve([record_id(collection, tenant, doc_id)], ["text"], False)
            return points[0].payload.get("text") if points else None

        return await self.store._run(text)

    async def put(self, collection: str, tenant: str, record: DocumentRecord) -> None:
        point = edge.Point(record_id(collection, tenant, record.doc_id), {}, record.payload(collection, tenant))
        upsert = edge.UpdateOperation.upsert_points([point])
        await self.store._write(collection, tenant, lambda generation: generation.documents.update(upsert))

    async def remove(self, collection: str, tenant: str, doc_id: str) -> None:
        if self.store._generations(collection).current() is None and collection not in self.store._writers:
            return
        delete = edge.UpdateOperation.delete_points([record_id(collection, tenant, doc_id)])
        await self.store._write(collection, tenant, lambda generation: generation.documents.update(delete))

