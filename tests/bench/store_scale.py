"""The embedded vector store at 1k, 10k and 100k chunks: qdrant-client's local mode (prefixgate's previous
embedded store, one collection per tenant), Qdrant Edge alone (``qdrant_edge.EdgeShard``: one shard, the
tenant an indexed payload key, every search filtered on it), and prefixgate's ``EdgeStore`` on it.

Per store and size, each in a fresh process (so its RSS is its own): ingest throughput (chunks/s in
batches of 64, as ``prefixgate ingest`` stores them; Edge's index build after the last batch counted
apart), search latency p50/p99 of single searches for 20 candidates within one tenant's chunks
(timed on a second pass over the questions: a serving gateway has its caches and pages warm), the
growth of the process's RSS over both (past its imports and the generated vectors), and for
Edge the overlap of its top 20 with the exact top 20 (its HNSW index is approximate). Chunks are
spread over 10 tenants and carry a payload like ingest's; vectors are seeded, of MiniLM's 384
dimensions, grouped in topics (``dataset``). Each cell is the median of ``--runs`` runs with its
range.

    python tests/bench/store_scale.py [--sizes 1000,10000,100000] [--runs 3] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from tests.bench import machine  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402

DIMENSIONS = 384
TENANTS = 10
BATCH = 64
QUERIES = 300
CANDIDATES = 20
EF_CONSTRUCT = 200  # Edge's graphs: candidates while building, and edges per node of each tenant's graph
PAYLOAD_M = 32
TEXT = "Passage text as ingest stores it, about one chunk's worth of characters. " * 11


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def dataset(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunk and question vectors with topics, as embeddings have: each is one of ``size // 50`` random topic
    directions plus noise (cosine about 0.7 to its topic). Uniform random vectors would have no neighbourhoods
    at all, the one case an HNSW graph cannot search well and no embedding model produces."""
    rng = np.random.default_rng(size)
    topics = unit(rng.standard_normal((max(20, size // 50), DIMENSIONS)))
    noise = 1.0 / np.sqrt(DIMENSIONS)
    vectors = unit(topics[rng.integers(0, len(topics), size)] + rng.standard_normal((size, DIMENSIONS)) * noise)
    queries = unit(topics[rng.integers(0, len(topics), QUERIES)] + rng.standard_normal((QUERIES, DIMENSIONS)) * noise)
    return vectors, queries


def payload(index: int) -> dict[str, Any]:
    return {"tenant": f"t{index % TENANTS}", "doc_id": f"doc-{index // 8}", "chunk_index": index % 8, "text": TEXT,
            "source": f"doc-{index // 8}.md", "start": 0, "end": len(TEXT)}


def rss_mb() -> float:
    """The process's resident memory now (not its peak: building the vectors peaks higher than the store)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def exact_top(vectors: np.ndarray, query: np.ndarray, tenant: int) -> set[int]:
    ids = np.arange(tenant, len(vectors), TENANTS)
    scores = vectors[ids] @ query
    return set(ids[np.argsort(-scores)[:CANDIDATES]].tolist())


def timed_searches(search: Any, queries: np.ndarray, vectors: np.ndarray) -> tuple[list[float], list[float]]:
    """Latencies (ms) and top-20 overlaps of single searches, one per question, on a second pass (the first
    warms what a serving gateway has warm: caches and memory-mapped pages)."""
    for _pass in ("warm-up", "timed"):
        latencies, overlaps = [], []
        for number, query in enumerate(queries):
            tenant = number % TENANTS
            began = time.perf_counter()
            hits = search(tenant, query)
            latencies.append((time.perf_counter() - began) * 1000)
            overlaps.append(len(set(hits) & exact_top(vectors, query, tenant)) / CANDIDATES)
    return latencies, overlaps


def run_local(size: int, folder: Path) -> dict[str, float]:
    """qdrant-client's local mode as the previous embedded store kept chunks: one collection per tenant."""
    from qdrant_client import QdrantClient, models

    vectors, queries = dataset(size)
    before = rss_mb()
    client = QdrantClient(path=str(folder))
    started = time.perf_counter()
    for tenant in range(TENANTS):  # ingest runs per tenant, in batches of 64
        client.create_collection(f"docs--t{tenant}", vectors_config=models.VectorParams(
            size=DIMENSIONS, distance=models.Distance.COSINE))
        ids = list(range(tenant, size, TENANTS))
        for first in range(0, len(ids), BATCH):
            client.upsert(f"docs--t{tenant}", [models.PointStruct(id=i, vector=vectors[i].tolist(), payload=payload(i))
                                               for i in ids[first:first + BATCH]])
    ingest = time.perf_counter() - started

    def search(tenant: int, query: np.ndarray) -> list[int]:
        points = client.query_points(f"docs--t{tenant}", query=query.tolist(), limit=CANDIDATES, with_payload=True)
        return [int(point.id) for point in points.points]

    latencies, overlaps = timed_searches(search, queries, vectors)
    client.close()
    p50, p99 = percentiles(latencies)
    return {"ingest_per_s": size / ingest, "index_s": 0.0, "p50_ms": p50, "p99_ms": p99,
            "rss_mb": rss_mb() - before, "overlap": sum(overlaps) / len(overlaps)}


def run_product(size: int, folder: Path) -> dict[str, float]:
    """prefixgate's embedded store (``EdgeStore``) as ingest and the gateway use it: one ingest writing every
    tenant's chunks (their BM25 vectors included) and publishing the generation, then searches through the
    store's own thread, filtered on the tenant."""
    from proxy.retrieval.edge_store import EdgeStore
    from proxy.retrieval.vector_store import StoredChunk

    vectors, queries = dataset(size)
    before = rss_mb()

    async def work() -> dict[str, float]:
        store = EdgeStore.open(folder, dimensions=DIMENSIONS)
        started = time.perf_counter()
        async with store.writing("docs", "t0"):
            for tenant in range(TENANTS):
                ids = list(range(tenant, size, TENANTS))
                for first in range(0, len(ids), BATCH):
                    await store.upsert("docs", f"t{tenant}", [
                        StoredChunk(str(uuid.UUID(int=i)), vectors[i].tolist(), f"t{tenant}", f"doc-{i // 8}", i % 8,
                                    TEXT, f"doc-{i // 8}.md", 0, len(TEXT)) for i in ids[first:first + BATCH]])
            ingest = time.perf_counter() - started
        index_s = time.perf_counter() - started - ingest  # the engine builds the graphs as the ingest publishes

        latencies: list[float] = []
        overlaps: list[float] = []
        for _pass in ("warm-up", "timed"):  # as timed_searches, awaiting the store
            latencies, overlaps = [], []
            for number, query in enumerate(queries):
                tenant = number % TENANTS
                began = time.perf_counter()
                hits = await store.search("docs", f"t{tenant}", query.tolist(), CANDIDATES)
                latencies.append((time.perf_counter() - began) * 1000)
                numbers = {int(hit.doc_id.removeprefix("doc-")) * 8 + hit.index for hit in hits}  # see payload()
                overlaps.append(len(numbers & exact_top(vectors, query, tenant)) / CANDIDATES)
        await store.aclose()
        p50, p99 = percentiles(latencies)
        return {"ingest_per_s": size / ingest, "index_s": index_s, "p50_ms": p50, "p99_ms": p99,
                "rss_mb": rss_mb() - before, "overlap": sum(overlaps) / len(overlaps)}

    return asyncio.run(work())


def run_edge(size: int, folder: Path) -> dict[str, float]:
    """One Qdrant Edge shard; the tenant is a tenant-keyed payload index and every search filters on it."""
    import qdrant_edge as edge

    vectors, queries = dataset(size)
    before = rss_mb()
    # Qdrant's multitenancy layout: no global graph (m=0), one graph per tenant (payload_m) over its payload index;
    # denser graphs than the defaults (16, 100) for recall, one search thread (two cores: a thread hand-off per
    # search costs more than it saves, and made the p99)
    hnsw = edge.HnswIndexConfig(m=0, ef_construct=EF_CONSTRUCT, full_scan_threshold=10_000, payload_m=PAYLOAD_M)
    config = edge.EdgeConfig(vectors=edge.EdgeVectorParams(size=DIMENSIONS, distance=edge.Distance.Cosine),
                             hnsw_config=hnsw, max_search_threads=1)
    shard = edge.EdgeShard.create(str(folder), config)
    shard.update(edge.UpdateOperation.create_field_index("tenant", edge.KeywordIndexParams(is_tenant=True)))
    started = time.perf_counter()
    for first in range(0, size, BATCH):
        points = [edge.Point(i, vectors[i].tolist(), payload(i)) for i in range(first, min(first + BATCH, size))]
        shard.update(edge.UpdateOperation.upsert_points(points))
    shard.flush()
    ingest = time.perf_counter() - started
    indexing = time.perf_counter()
    shard.optimize()
    index_s = time.perf_counter() - indexing
    def search(tenant: int, query: np.ndarray) -> list[int]:
        where = edge.Filter(must=[edge.FieldCondition(key="tenant", match=edge.MatchValue(f"t{tenant}"))])
        request = edge.QueryRequest(limit=CANDIDATES, query=edge.Query.Nearest(query.tolist()), filter=where,
                                    with_payload=True)
        return [int(hit.id) for hit in shard.query(request)]

    latencies, overlaps = timed_searches(search, queries, vectors)
    shard.close()
    p50, p99 = percentiles(latencies)
    return {"ingest_per_s": size / ingest, "index_s": index_s, "p50_ms": p50, "p99_ms": p99,
            "rss_mb": rss_mb() - before, "overlap": sum(overlaps) / len(overlaps)}


def worker(store: str, size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pg-scale-") as folder:
        run = {"local": run_local, "edge": run_edge, "prefixgate": run_product}[store]
        print("RESULT " + json.dumps(run(size, Path(folder) / "store")))


def measure(store: str, size: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--worker", store, str(size)], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return json.loads(done.stdout.split("RESULT ", 1)[1])


FIGURES = ("ingest_per_s", "index_s", "p50_ms", "p99_ms", "rss_mb", "overlap")


def summarize(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {name: {"median": median(run[name] for run in runs), "min": min(run[name] for run in runs),
                   "max": max(run[name] for run in runs)} for name in FIGURES}


def table(results: dict[str, Any]) -> str:
    def cell(figure: dict[str, float], digits: int) -> str:
        return f"{figure['median']:.{digits}f} [{figure['min']:.{digits}f}-{figure['max']:.{digits}f}]"

    rows = ["| chunks | store | ingest chunks/s | index build s | search p50 ms | search p99 ms | RSS growth MB | "
            "top-20 overlap with exact |", "|---|---|---|---|---|---|---|---|"]
    for key, row in results.items():
        size, store = key.split("/")
        rows.append(f"| {int(size):,} | {store} | {cell(row['ingest_per_s'], 0)} | {cell(row['index_s'], 2)} | "
                    f"{cell(row['p50_ms'], 3)} | {cell(row['p99_ms'], 3)} | {cell(row['rss_mb'], 0)} | "
                    f"{cell(row['overlap'], 3)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stores", default="local,edge,prefixgate")
    parser.add_argument("--worker", nargs=2, metavar=("STORE", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return
    results: dict[str, Any] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        runs: dict[str, list[dict[str, float]]] = {store: [] for store in args.stores.split(",")}
        for _ in range(args.runs):  # stores interleaved, so drift on a noisy machine hits both alike
            for store in runs:
                runs[store].append(measure(store, size))
                print(f"{size} {store}: {runs[store][-1]}", flush=True)
        for store, measured in runs.items():
            results[f"{size}/{store}"] = summarize(measured)
    command = command_line("store_scale.py", sys.argv[1:])
    versions = ", ".join(v for v in (machine.version(name) for name in ("qdrant-client", "qdrant-edge-py")) if v)
    when = date.today().isoformat()
    block = "\n".join([
        f"Command: `{command.strip()}`; run of {when} on {machine.machine()}; {versions}. Median of {args.runs} "
        f"runs [range]; {TENANTS} tenants, {QUERIES} single searches for {CANDIDATES} candidates in one tenant's "
        "chunks, timed on a second pass (the first warms caches and memory maps); local: one collection per tenant "
        "(brute force, the previous embedded store); edge: one shard, tenant-keyed payload index, one HNSW graph per "
        f"tenant (m=0, payload_m={PAYLOAD_M}, ef_construct={EF_CONSTRUCT}) built by optimize() after ingest, one "
        "search thread; prefixgate: the embedded store as the gateway runs it, on those settings plus int8 copies of "
        "the vectors for the graph walk, rescored on the full ones (oversampling 2); one ingest that also stores "
        "BM25 vectors and publishes a generation, its index build counted apart; searches through its thread.",
        "", table(results), "", "Result file: `docs/store_scale.json`."])
    write_result(Path(args.out), "store_scale", {"date": when, "machine": machine.machine(), "versions": versions,
                                                 "command": command.strip(), "runs": args.runs}, results)
    write_block(Path(args.out), "store_scale", block)
    print(table(results))


if __name__ == "__main__":
    main()
