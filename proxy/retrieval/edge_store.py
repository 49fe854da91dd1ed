"""The embedded default: chunks in Qdrant's own engine (``qdrant_edge``) inside this process, under a folder.

One shard per collection holds every tenant's chunks (the tenant an indexed key, one HNSW graph per tenant, a
dense and a BM25 vector per chunk); a second shard holds the document records. Qdrant's engine runs the search in
Rust, where the previous embedded store (qdrant-client's local mode) scanned every point in Python:
docs/benchmarks.md has both at 1k to 100k chunks.

An engine belongs to the process that opens it and writes in its folder on every open and close, so collections
live as ``Generations`` that no engine opens once published: each gateway worker searches its own copy of the
published generation (``open_copy``), made when it polls ``versions`` (never by a search); an ingest, in any
process, writes a copy and publishes it when it ends. Ingest runs beside live gateways, two ingests of one
collection take turns, and a killed ingest changes nothing. Every engine call runs in one worker thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as edge

from policies.retrieval.evidence import Chunk
from proxy.retrieval.edge_records import EdgeRecords
from proxy.retrieval.edge_shards import (
    MANIFEST,
    Generation,
    create_generation,
    load_generation,
    payload_of,
    search_request,
    tenant_filter,
)
from proxy.retrieval.generations import CURRENT, Generations, folder_name
from proxy.retrieval.local_mode import LocalModeFolder, holds_local_mode
from proxy.retrieval.reader_copies import OpenCopy, open_copy
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

__all__ = ["EdgeStore", "LocalModeFolder", "holds_local_mode"]

log = logging.getLogger("prefixgate")


@dataclass
class _Writer:
    generations: Generations
    generation: Generation
    tenants: set[str] = field(default_factory=set)


class EdgeStore(VectorStore):
    def __init__(self, path: Path, dimensions: int) -> None:
        self.path = path
        self.root = path / "edge"
        self.dimensions = dimensions
        self.words = WordVectors()
        self.records = EdgeRecords(self)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefixgate-qdrant")
        self._readers: dict[str, OpenCopy] = {}  # collection -> this process's copy of the published generation
        self._writers: dict[str, _Writer] = {}  # collection -> this process's ingest under way

    @classmethod
    def open(cls, path: Path, *, dimensions: int) -> EdgeStore:
        if holds_local_mode(path):
            raise LocalModeFolder(path)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path, dimensions)

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    def _generations(self, collection: str) -> Generations:
        return Generations(self.root / folder_name(collection))

    def reading(self, collection: str, *, copy: bool = True) -> Generation | None:
        """The generation a read uses: this process's own ingest under way, else the published one; with ``copy``
        false (a search) one this process has no copy of yet reads as missing rather than copied on the spot."""
        writer = self._writers.get(collection)
        if writer is not None:
            return writer.generation
        reader = self._readers.get(collection)
        if reader is None:
            reader = open_copy(self._generations(collection)) if copy else None
            if reader is None:
                return None
            self._readers[collection] = reader
        return reader.generation

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
                generation = await self.run(self._open_for_writing, path, collection)
            except BaseException:
                generations.discard(path)
                raise
            self._writers[collection] = _Writer(generations, generation, {tenant})
            try:
                yield
            except BaseException:
                await self.run(self._abandon, collection)
                raise
            await self.run(self._publish, collection)
        finally:
            lock.__exit__(None, None, None)
        await self._open_reader(collection)  # its searches read what it published (its old copy meanwhile)

    async def _open_reader(self, collection: str) -> None:
        """Copy the published generation in a side thread (seconds for a big one) and search it from then on; a copy
        that fails is logged, and the copy in use (if any) stays: the next poll tries again."""
        try:
            fresh = await asyncio.to_thread(open_copy, self._generations(collection))
        except Exception:
            log.warning("could not copy collection %s; searches read the copy they had", collection, exc_info=True)
            return
        if fresh is not None:
            await self.run(self._swap, collection, fresh)

    def _open_for_writing(self, path: Path, collection: str) -> Generation:
        if not (path / MANIFEST).is_file():
            return create_generation(path, collection, self.dimensions)
        generation = load_generation(path)
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
        writer.generations.publish(generation.path)  # closed above: from here on no engine opens it

    def _swap(self, collection: str, fresh: OpenCopy) -> None:
        old = self._readers.get(collection)
        self._readers[collection] = fresh
        if old is not None:
            old.close()

    async def write(self, collection: str, tenant: str, change: Callable[[Generation], Any]) -> Any:
        async with self.writing(collection, tenant):
            return await self.run(change, self._writers[collection].generation)

    def holds(self, collection: str) -> bool:
        """Whether the collection exists, published or in this process's ingest under way."""
        return collection in self._writers or self._generations(collection).current() is not None

    async def ensure_collection(self, collection: str, tenant: str) -> None:
        if not self.holds(collection):
            async with self.writing(collection, tenant):
                pass

    async def upsert(self, collection: str, tenant: str, chunks: Sequence[StoredChunk]) -> None:
        self.check_tenant(tenant, chunks)
        points = []
        for chunk in chunks:
            indices, values = self.words.document(chunk.text)
            vectors: dict[str, edge.NamedVector] = {DENSE_VECTOR: chunk.vector,
                                                   SPARSE_VECTOR: edge.SparseVector(indices, values)}
            points.append(edge.Point(chunk.id, vectors, chunk.payload()))
        await self.write(collection, tenant,
                          lambda generation: generation.chunks.update(edge.UpdateOperation.upsert_points(points)))

    async def delete_document(self, collection: str, tenant: str, doc_id: str) -> int:
        if not self.holds(collection):
            return 0
        where = tenant_filter(tenant, doc_id=doc_id)

        def delete(generation: Generation) -> int:
            count = generation.chunks.count(edge.CountRequest(exact=True, filter=where))
            if count:
                generation.chunks.update(edge.UpdateOperation.delete_points_by_filter(where))
            return int(count)

        return int(await self.write(collection, tenant, delete))

    async def count(self, collection: str, tenant: str) -> int:
        def count() -> int:
            generation = self.reading(collection)
            if generation is None:
                return 0
            return int(generation.chunks.count(edge.CountRequest(exact=True, filter=tenant_filter(tenant))))

        return int(await self.run(count))

    def _search_collection(self, collection: str, queries: list[SearchQuery]) -> list[list[Chunk] | Exception]:
        generation = self.reading(collection, copy=False)
        if generation is None:
            return [MissingCollection(collection) for _ in queries]
        requests = [search_request(query, self.words) for query in queries]
        asked = [request for request in requests if request is not None]
        try:
            answers = iter(generation.chunks.query_batch(edge.QueryBatchRequest(asked)) if asked else [])
        except Exception:  # one bad query (a vector of the wrong size) fails the batch: ask one by one
            return [self._search_one(generation, request) for request in requests]
        return [[] if request is None else [chunk_of(payload_of(point), point.score) for point in next(answers)]
                for request in requests]

    @staticmethod
    def _search_one(generation: Generation, request: edge.QueryRequest | None) -> list[Chunk] | Exception:
        if request is None:
            return []
        try:
            return [chunk_of(payload_of(point), point.score) for point in generation.chunks.query(request)]
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
        return await self.run(self._search_all, queries)

    # -- versions: how this process learns of another's ingest --

    def _published(self) -> dict[str, tuple[Path, dict[str, Any]]]:
        """collection -> its published generation and manifest, for every collection under the folder."""
        found = {}
        if self.root.is_dir():
            for folder in self.root.iterdir():
                try:
                    name = (folder / CURRENT).read_text().strip()
                    manifest = json.loads((folder / name / MANIFEST).read_text())
                except (FileNotFoundError, NotADirectoryError):
                    continue
                found[manifest["collection"]] = (folder / name, manifest)
        return found

    async def versions(self) -> dict[tuple[str, str], str]:
        """Also copies every collection published since this process last looked (new, or a newer generation)."""
        versions: dict[tuple[str, str], str] = {}
        for collection, (path, manifest) in (await asyncio.to_thread(self._published)).items():
            reader = self._readers.get(collection)
            if (reader is None or reader.copy.source != path) and collection not in self._writers:
                await self._open_reader(collection)
            versions.update({(collection, tenant): version for tenant, version in manifest["versions"].items()})
        return versions

    async def aclose(self) -> None:
        def close_all() -> None:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()

        await self.run(close_all)
        self._thread.shutdown(wait=False)
