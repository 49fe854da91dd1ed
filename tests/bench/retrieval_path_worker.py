"""One round of the retrieval-path measurement, against the prefixgate tree named on the command line.

    python tests/bench/retrieval_path_worker.py --tree DIR [--questions 256]

Imports prefixgate from DIR (this checkout, or a worktree of an earlier commit), so ``retrieval.py
--baseline`` can run the same measurement on two trees side by side, round by round. Builds the tree's
own embedder and embedded store over the synthetic corpus, then times ``Retriever.retrieve`` (embed +
search + select, no passage cache: every question is a first ask) with the micro-batcher off (batches of
1) and on (up to 32), at concurrency 1 and 32. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

PRODUCTS = ["blender", "kettle", "toaster", "coffee grinder", "juicer", "rice cooker", "air fryer", "mixer"]
TOPICS = {
    "warranty": "The {p} carries a {n}-year warranty that covers the motor and the heating parts.",
    "returns": "An unused {p} may be returned within {n}0 days of delivery for a full refund.",
    "cleaning": "Clean the {p} with a damp cloth after each use; never put its base in water ({n} parts).",
    "shipping": "The {p} ships in {n} business days by ground courier in a recyclable box.",
    "safety": "Keep the {p} at least {n}0 cm from the edge of the counter and away from children.",
}


def corpus() -> list[tuple[str, int, str]]:
    """80 product-FAQ chunks, each also published as a near-copy."""
    rng = random.Random(7)
    chunks = []
    for product in PRODUCTS:
        for index, (topic, text) in enumerate(TOPICS.items()):
            body = text.format(p=product, n=rng.randint(1, 5))
            chunks.append((f"{product}/{topic}.md", index, body))
            chunks.append((f"mirror/{product}/{topic}.md", index, body.replace("The ", "Our ", 1)))
    return chunks


def bench_questions(count: int) -> list[str]:
    rng = random.Random(11)
    return [f"How do I {rng.choice(['clean', 'return', 'ship', 'safely place'])} my "
            f"{rng.choice(PRODUCTS)}? ({n})" for n in range(count)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_load(retriever: object, settings: object, questions: list[str], concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    queue = list(questions)

    async def worker() -> None:
        while queue:
            question = queue.pop()
            started = time.perf_counter()
            await retriever.retrieve("bench", settings, question)  # type: ignore[attr-defined]
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"p50": percentile(latencies, 0.5) * 1000, "p95": percentile(latencies, 0.95) * 1000,
            "qps": len(questions) / elapsed}


def open_store(folder: Path, dimensions: int) -> object:
    """The tree's embedded store: Qdrant's engine where the tree has it, else qdrant-client's local mode."""
    try:
        from proxy.retrieval.edge_store import EdgeStore
    except ImportError:
        from proxy.retrieval.vector_store import VectorStore

        return VectorStore.open(dimensions=dimensions, path=folder)
    return EdgeStore.open(folder, dimensions=dimensions)


async def measure(questions: list[str]) -> dict[str, dict[str, float]]:
    from proxy.config.retrieval import TenantRetrieval
    from proxy.retrieval.embeddings import LocalMiniLM
    from proxy.retrieval.retriever import Retriever
    from proxy.retrieval.vector_store import StoredChunk

    embedder = LocalMiniLM()
    store = open_store(Path(tempfile.mkdtemp(prefix="pg-path-")) / "qdrant", embedder.dimensions)
    chunks = corpus()
    vectors = await embedder.embed([text for _, _, text in chunks])
    stored = [StoredChunk(f"00000000-0000-4000-8000-{i:012d}", vector, "bench", doc, index, text, doc, 0, len(text))
              for i, ((doc, index, text), vector) in enumerate(zip(chunks, vectors, strict=True))]
    await store.ensure_collection("bench", "bench")  # type: ignore[attr-defined]
    await store.upsert("bench", "bench", stored)  # type: ignore[attr-defined]
    settings = TenantRetrieval(collection="bench", candidates=20, top_n=5, budget_tokens=1500)  # the tree's defaults
    cells: dict[str, dict[str, float]] = {}
    for batch in (1, 32):
        retriever = Retriever(embedder, store, max_batch=batch, max_wait=0.0)  # type: ignore[arg-type]
        await run_load(retriever, settings, questions[:32], 8)  # warm-up
        for concurrency in (1, 32):
            cells[f"batch {batch}, concurrency {concurrency}"] = await run_load(retriever, settings, questions,
                                                                                concurrency)
    await store.aclose()  # type: ignore[attr-defined]
    await embedder.aclose()
    return cells


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True, help="the prefixgate checkout to import")
    parser.add_argument("--questions", type=int, default=256)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.tree).resolve()))
    cells = asyncio.run(measure(bench_questions(args.questions)))
    import proxy

    print(json.dumps({"imported_from": str(Path(proxy.__file__).parent.parent), "cells": cells}))


if __name__ == "__main__":
    main()
