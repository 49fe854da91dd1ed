"""Retrieval path benchmark: embed (micro-batched or not) + Qdrant search + selection, in-process.

Real parts: all-MiniLM-L6-v2 on the CPU and Qdrant in embedded local mode, on a synthetic corpus
(product FAQ chunks, each also stored as a near-copy, as re-published pages are). Measures, in one
run:
  * the retrieval path's latency p50/p95 and questions/s at concurrency 1 and 32, with the
    micro-batcher (batches of up to 32) and without it (batches of 1);
  * the cached path: a repeated question answered from the passage cache;
  * evidence tokens with selection (dedupe, merge, budget) against the plain top-N concatenation.

    python tests/bench/retrieval.py [--questions 256] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.evidence import EvidencePolicy, select_evidence  # noqa: E402
from proxy.config.retrieval import TenantRetrieval  # noqa: E402
from proxy.retrieval.edge_store import EdgeStore  # noqa: E402
from proxy.retrieval.embeddings import LocalMiniLM  # noqa: E402
from proxy.retrieval.passage_cache import RetrievalCache, cache_key  # noqa: E402
from proxy.retrieval.retriever import Retriever, passage_budget_tokens  # noqa: E402
from proxy.retrieval.vector_store import StoredChunk  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402

PRODUCTS = ["blender", "kettle", "toaster", "coffee grinder", "juicer", "rice cooker", "air fryer", "mixer"]
TOPICS = {
    "warranty": "The {p} carries a {n}-year warranty that covers the motor and the heating parts.",
    "returns": "An unused {p} may be returned within {n}0 days of delivery for a full refund.",
    "cleaning": "Clean the {p} with a damp cloth after each use; never put its base in water ({n} parts).",
    "shipping": "The {p} ships in {n} business days by ground courier in a recyclable box.",
    "safety": "Keep the {p} at least {n}0 cm from the edge of the counter and away from children.",
}


def corpus() -> list[tuple[str, int, str]]:
    rng = random.Random(7)
    chunks = []
    for product in PRODUCTS:
        for index, (topic, text) in enumerate(TOPICS.items()):
            body = text.format(p=product, n=rng.randint(1, 5))
            chunks.append((f"{product}/{topic}.md", index, body))
            chunks.append((f"mirror/{product}/{topic}.md", index, body.replace("The ", "Our ", 1)))
    return chunks


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_load(retriever: Retriever, settings: TenantRetrieval, questions: list[str], concurrency: int) -> dict:
    latencies: list[float] = []
    queue = list(questions)

    async def worker() -> None:
        while queue:
            question = queue.pop()
            started = time.perf_counter()
            await retriever.retrieve("bench", settings, question)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"p50": percentile(latencies, 0.5) * 1000, "p95": percentile(latencies, 0.95) * 1000,
            "qps": len(questions) / elapsed}


async def main_async(args: argparse.Namespace, data: dict) -> list[str]:
    """The block's lines; ``data`` receives the numbers behind them (the result file)."""
    embedder = LocalMiniLM()
    store = EdgeStore.open(Path(tempfile.mkdtemp()) / "qdrant", dimensions=embedder.dimensions)
    chunks = corpus()
    await store.ensure_collection("bench", "bench")
    vectors = await embedder.embed([text for _, _, text in chunks])
    stored = [StoredChunk(f"00000000-0000-4000-8000-{i:012d}", vector, "bench", doc, index, text, doc, 0, len(text))
              for i, ((doc, index, text), vector) in enumerate(zip(chunks, vectors, strict=True))]
    await store.upsert("bench", "bench", stored)
    rng = random.Random(11)
    questions = [f"How do I {rng.choice(['clean', 'return', 'ship', 'safely place'])} my "
                 f"{rng.choice(PRODUCTS)}? ({n})" for n in range(args.questions)]
    settings = TenantRetrieval(collection="bench", candidates=20, top_n=5, budget_tokens=1500)
    # The micro-batcher's own knobs, as proxy.config.gateway.RetrievalConfig would set them. Each run measures
    # both settings at both concurrencies, so every ratio compares numbers taken side by side.
    runs: dict[tuple[int, int], list[dict]] = {}
    for run in range(args.runs):
        for batch in (1, 32):
            retriever = Retriever(embedder, store, max_batch=batch, max_wait=args.wait_ms / 1000)
            await run_load(retriever, settings, questions[:32], 8)  # warm-up
            for concurrency in (1, 32):
                runs.setdefault((batch, concurrency), []).append(
                    await run_load(retriever, settings, questions, concurrency))
                print(f"run {run + 1}: batch {batch}, concurrency {concurrency}: {runs[(batch, concurrency)][-1]}",
                      flush=True)
    lines = [f"Medians of {args.runs} runs (range of questions/s in brackets).", "",
             "| micro-batching | concurrency | p50 ms | p95 ms | questions/s |", "|---|---|---|---|---|"]
    for (batch, concurrency), measured in runs.items():
        label = "off (batches of 1)" if batch == 1 else f"on (up to 32, {args.wait_ms:g} ms window)"
        rates = [m["qps"] for m in measured]
        lines.append(f"| {label} | {concurrency} | {median(m['p50'] for m in measured):.1f} "
                     f"| {median(m['p95'] for m in measured):.1f} | {median(rates):.0f} "
                     f"({min(rates):.0f}-{max(rates):.0f}) |")
    ratios = [on["qps"] / off["qps"] for on, off in zip(runs[(32, 32)], runs[(1, 32)], strict=True)]
    lines += ["", f"Throughput at concurrency 32, batching on / off: **{median(ratios):.1f}x** "
              f"(runs {min(ratios):.1f}-{max(ratios):.1f}x)."]
    data["runs"] = [{"batch": batch, "concurrency": concurrency, "measured": measured}
                    for (batch, concurrency), measured in runs.items()]
    data["batching_ratio"] = ratios

    cached = Retriever(embedder, store, max_batch=32, max_wait=0, cache=RetrievalCache(ttl=300, empty_ttl=30))
    repeated = questions[:64]
    for question in repeated:
        await cached.retrieve("bench", settings, question)
    hits = []
    for question in repeated * 4:
        started = time.perf_counter()
        await cached.retrieve("bench", settings, question)
        hits.append((time.perf_counter() - started) * 1000)
    data["cached_lookup_ms"] = {"p50": percentile(hits, 0.5), "p95": percentile(hits, 0.95)}
    lines += ["", f"Cached path (a repeated question: key, lookup, no model or store), {len(hits)} lookups: "
              f"p50 {percentile(hits, 0.5):.3f} ms, p95 {percentile(hits, 0.95):.3f} ms."]

    lines += ["", await shared_tier_line(cached, settings, repeated)]

    plain, selected = [], []
    wide = EvidencePolicy(top_n=10, budget_tokens=100_000, duplicate_similarity=settings.duplicate_similarity)
    for question in questions[:64]:
        vector = (await embedder.embed([question]))[0]
        hits = await store.search("bench", "bench", vector, 10)
        plain.append(sum(passage_budget_tokens(h.text) for h in hits))
        selected.append(sum(p.tokens for p in select_evidence(hits, wide, passage_budget_tokens)))
    data["evidence_tokens"] = {"retrieved": median(plain), "selected": median(selected)}
    lines += ["", f"Evidence size on this corpus (every chunk is also published as a near-copy), median over 64 "
              f"questions, passage text of the top 10 hits: as retrieved {median(plain):.0f} tokens, after "
              f"selection {median(selected):.0f} tokens ({1 - median(selected) / median(plain):.0%} fewer; the "
              f"dropped ones were near-copies of kept ones)."]
    await store.aclose()
    await embedder.aclose()
    return lines


async def shared_tier_line(filled: Retriever, settings: TenantRetrieval, questions: list[str]) -> str:
    """A repeated question answered by Redis (another replica stored it; this one's front tier is empty)."""
    import shutil

    if shutil.which("redis-server") is None:
        return "Redis tier: not measured (no redis-server here)."
    from proxy.caches.tiered import tiered_cache
    from proxy.config.redis import RedisConfig
    from tests.support.redis_server import RedisServer

    server = RedisServer(Path(tempfile.mkdtemp()))
    server.start()
    try:
        settings_redis = RedisConfig(url=server.url, front_ttl_s=0.001)
        writer = RetrievalCache(ttl=300, empty_ttl=30, store=tiered_cache(settings_redis, "passages"))
        reader = RetrievalCache(ttl=300, empty_ttl=30, store=tiered_cache(settings_redis, "passages"))
        assert filled.cache is not None
        keys = []
        for question in questions:
            key = cache_key("bench", question, settings, "0")
            passages = await filled.cache.get(key)
            assert passages is not None
            await writer.put(key, passages)
            keys.append(key)
        reads = []
        for key in keys * 4:
            await asyncio.sleep(0.002)  # past the front tier's TTL: every read goes to Redis
            started = time.perf_counter()
            assert await reader.get(key) is not None
            reads.append((time.perf_counter() - started) * 1000)
        await writer.aclose()
        await reader.aclose()
    finally:
        server.stop()
    return (f"Redis tier (shared by replicas; a local redis-server, the front tier expired so every read "
            f"goes to Redis and decodes the passages), {len(reads)} reads: p50 {percentile(reads, 0.5):.3f} ms, "
            f"p95 {percentile(reads, 0.95):.3f} ms.")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=256)
    parser.add_argument("--wait-ms", type=float, default=0.0, help="the micro-batcher's window when idle")
    parser.add_argument("--runs", type=int, default=3, help="repeats of the micro-batching comparison")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    data: dict = {}
    lines = asyncio.run(main_async(args, data))
    command = "python tests/bench/retrieval.py " + " ".join(sys.argv[1:])
    packages = ("sentence-transformers", "torch", "qdrant-client")
    versions = ", ".join(v for v in (machine.version(name) for name in packages) if v)
    when = date.today().isoformat()
    block = "\n".join([f"Command: `{command.strip()}` (MiniLM on the CPU, Qdrant local mode); run of "
                       f"{when} on {machine.machine()}; {versions}", "", *lines, "",
                       "Result file: `docs/retrieval.json`."])
    write_result(Path(args.out), "retrieval", {"date": when, "machine": machine.machine(), "versions": versions,
                                               "command": command.strip(), "runs": args.runs}, data)
    write_block(Path(args.out), "retrieval", block)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
