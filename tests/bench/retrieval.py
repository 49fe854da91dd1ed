"""Retrieval path benchmark: embed (micro-batched or not) + search + selection, in-process.

Real parts: all-MiniLM-L6-v2 on the CPU and the embedded store, on a synthetic corpus (product FAQ
chunks, each also stored as a near-copy, as re-published pages are). Measures, in one run:
  * the retrieval path's latency p50/p95 and questions/s at concurrency 1 and 32, with the
    micro-batcher (batches of up to 32) and without it (batches of 1), every question a first ask
    (``tests/bench/retrieval_path_worker.py``, one process per round); with ``--baseline REF`` the same
    rounds also run on a worktree of REF, alternating with this tree, so old and new are side by side;
  * evidence tokens with selection (dedupe, merge, budget) against the plain top-N concatenation.

With ``--tiers`` it measures only a repeated question answered by the passage cache's tiers, in process and
from Redis (a local redis-server, as replicas share it), ``--runs`` times, into docs/retrieval_tiers.json.

    python tests/bench/retrieval.py [--baseline REF] [--runs 3] [--questions 256] [--out docs/benchmarks.md]
    python tests/bench/retrieval.py --tiers [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import date
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.retrieval.evidence import EvidencePolicy, select_evidence  # noqa: E402
from proxy.caches.tiered import TieredCache  # noqa: E402
from proxy.clock import SYSTEM_CLOCK  # noqa: E402
from proxy.config.retrieval import TenantRetrieval  # noqa: E402
from proxy.retrieval.edge_store import EdgeStore  # noqa: E402
from proxy.retrieval.embeddings import LocalMiniLM  # noqa: E402
from proxy.retrieval.passage_cache import RetrievalCache, cache_key  # noqa: E402
from proxy.retrieval.retriever import Retriever, passage_budget_tokens  # noqa: E402
from proxy.retrieval.vector_store import StoredChunk  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402
from tests.bench.retrieval_path_worker import bench_questions, corpus, percentile  # noqa: E402


def worker_round(tree: Path, questions: int) -> dict:
    command = [sys.executable, str(ROOT / "tests" / "bench" / "retrieval_path_worker.py"), "--tree", str(tree),
               "--questions", str(questions)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=tree)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(measured["imported_from"]).resolve() == tree.resolve(), measured  # the tree under test, not this one
    return measured["cells"]


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="pg-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), ref], check=True,
                   capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)], check=True)


def path_lines(args: argparse.Namespace, data: dict) -> list[str]:
    """The path table: each tree's cells over ``args.runs`` rounds, trees alternating within a round."""
    trees = {"this tree": ROOT}
    with worktree(args.baseline) if args.baseline else nullcontext(None) as baseline:
        if baseline is not None:
            trees = {f"baseline {args.baseline}": baseline, "this tree": ROOT}
        rounds: dict[str, list[dict]] = {name: [] for name in trees}
        for run in range(args.runs):
            order = list(trees.items()) if run % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                rounds[name].append(worker_round(tree, args.questions))
                print(f"run {run + 1}, {name}: {rounds[name][-1]}", flush=True)
    data["path"] = rounds
    lines = [f"Every question a first ask (no passage cache); medians of {args.runs} rounds, range of questions/s "
             "in brackets.", "",
             "| tree | micro-batching | concurrency | p50 ms | p95 ms | questions/s |", "|---|---|---|---|---|---|"]
    for name, measured in rounds.items():
        for cell in measured[0]:
            runs = [m[cell] for m in measured]
            rates = [r["qps"] for r in runs]
            batching = "off (batches of 1)" if cell.startswith("batch 1,") else "on (up to 32)"
            lines.append(f"| {name} | {batching} | {cell.rsplit(' ', 1)[1]} | {median(r['p50'] for r in runs):.1f} | "
                         f"{median(r['p95'] for r in runs):.1f} | {median(rates):.0f} ({min(rates):.0f}-"
                         f"{max(rates):.0f}) |")
    lines.append("")
    for name, measured in rounds.items():
        ratios = [m["batch 32, concurrency 32"]["qps"] / m["batch 1, concurrency 32"]["qps"] for m in measured]
        first = [m["batch 32, concurrency 1"]["p50"] for m in measured]
        data.setdefault("batching_ratio", {})[name] = ratios
        lines.append(f"- {name}: batching on / off at concurrency 32 **{median(ratios):.1f}x** "
                     f"(rounds {min(ratios):.1f}-{max(ratios):.1f}x); a first ask alone, p50 "
                     f"**{median(first):.1f} ms** ({min(first):.1f}-{max(first):.1f}).")
    if len(rounds) == 2:
        old, new = rounds.values()
        for cell in ("batch 32, concurrency 1", "batch 32, concurrency 32"):
            ratios = [n[cell]["qps"] / o[cell]["qps"] for o, n in zip(old, new, strict=True)]
            data.setdefault("new_over_baseline", {})[cell] = ratios
            lines.append(f"- this tree / baseline, questions/s with batching at concurrency {cell.rsplit(' ', 1)[1]}: "
                         f"**{median(ratios):.2f}x** (rounds {min(ratios):.2f}-{max(ratios):.2f}x).")
    return lines


async def filled_store() -> tuple[LocalMiniLM, EdgeStore]:
    """MiniLM and an embedded store holding the synthetic corpus, in this process."""
    embedder = LocalMiniLM()
    store = EdgeStore.open(Path(tempfile.mkdtemp()) / "qdrant", dimensions=embedder.dimensions)
    chunks = corpus()
    await store.ensure_collection("bench", "bench")
    vectors = await embedder.embed([text for _, _, text in chunks])
    stored = [StoredChunk(f"00000000-0000-4000-8000-{i:012d}", vector, "bench", doc, index, text, doc, 0, len(text))
              for i, ((doc, index, text), vector) in enumerate(zip(chunks, vectors, strict=True))]
    await store.upsert("bench", "bench", stored)
    return embedder, store


async def main_async(args: argparse.Namespace, data: dict) -> list[str]:
    """The block's lines; ``data`` receives the numbers behind them (the result file)."""
    lines = path_lines(args, data)  # first, in worker processes, while this one holds no model
    embedder, store = await filled_store()
    questions = bench_questions(args.questions)
    settings = TenantRetrieval(collection="bench", candidates=20, top_n=5, budget_tokens=1500)

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


async def tiers_run(questions: list[str]) -> dict[str, list[float]]:
    """One run: the read times (ms) of a repeated question in each tier of the passage cache."""
    embedder, store = await filled_store()
    settings = TenantRetrieval(collection="bench", candidates=20, top_n=5, budget_tokens=1500)
    cached = Retriever(embedder, store, max_batch=32, max_wait=0, cache=RetrievalCache(
        ttl=300, empty_ttl=30, store=TieredCache(clock=SYSTEM_CLOCK)))
    for question in questions:
        await cached.retrieve("bench", settings, question)
    in_process = []
    for question in questions * 4:
        started = time.perf_counter()
        await cached.retrieve("bench", settings, question)
        in_process.append((time.perf_counter() - started) * 1000)
    from_redis = await redis_reads(cached, settings, questions)
    await store.aclose()
    await embedder.aclose()
    return {"in_process": in_process, "redis": from_redis}


def tiers(args: argparse.Namespace) -> None:
    """``--tiers``: each tier's p50 and p95 in each of ``args.runs`` runs, the medians and ranges to the docs."""
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is needed for --tiers: apt-get install -y redis-server (make test installs it)")
    questions = bench_questions(args.questions)[:64]
    runs = []
    for number in range(args.runs):
        reads = asyncio.run(tiers_run(questions))
        runs.append({tier: {"reads": len(times), "p50_ms": percentile(times, 0.5), "p95_ms": percentile(times, 0.95)}
                     for tier, times in reads.items()})
        print(f"run {number + 1}: {json.dumps(runs[-1])}", flush=True)
    summary = {tier: {key: spread([run[tier][key] for run in runs]) for key in ("p50_ms", "p95_ms")}
               for tier in runs[0]}
    command = command_line("retrieval.py", sys.argv[1:])
    versions = ", ".join(v for v in (machine.version(name) for name in ("redis", "qdrant-edge-py")) if v)
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    server = next((word.split("=", 1)[1] for word in redis_version if word.startswith("v=")), "unknown")
    when = date.today().isoformat()
    meta = {"date": when, "machine": machine.machine(), "versions": f"redis-server {server}, {versions}",
            "command": command, "runs": args.runs, "questions": len(questions)}
    labels = {"in_process": "in process (this replica's passage cache)",
              "redis": "Redis (another replica stored it; a local redis-server, this replica's front tier expired, so "
                       "every read goes to Redis and decodes the passages)"}
    lines = [f"Command: `{command}`; run of {when} on {meta['machine']}; {meta['versions']}.", "",
             f"A repeated question answered from the passage cache, no model or store: {len(questions)} questions "
             f"read 4 times each per run; median of {args.runs} runs [range].", "",
             "| tier | p50 ms | p95 ms |", "|---|---|---|"]
    for tier, figures in summary.items():
        cells = [f"{f['median']:.3f} [{f['min']:.3f}-{f['max']:.3f}]" for f in (figures["p50_ms"], figures["p95_ms"])]
        lines.append(f"| {labels[tier]} | {' | '.join(cells)} |")
    lines += ["", "Result file: `docs/retrieval_tiers.json`."]
    write_result(Path(args.out), "retrieval_tiers", meta, {"summary": summary, "runs": runs})
    write_block(Path(args.out), "retrieval_tiers", "\n".join(lines))
    print("\n".join(lines))


def spread(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values)}


async def redis_reads(filled: Retriever, settings: TenantRetrieval, questions: list[str]) -> list[float]:
    """A repeated question answered by Redis (another replica stored it; this one's front tier is empty)."""
    from proxy.caches.tiered import tiered_cache
    from proxy.config.redis import RedisConfig
    from tests.support.redis_server import RedisServer

    server = RedisServer(Path(tempfile.mkdtemp()))
    server.start()
    try:
        settings_redis = RedisConfig(url=server.url, front_ttl_s=0.001)
        writer = RetrievalCache(ttl=300, empty_ttl=30,
                                store=tiered_cache(settings_redis, "passages", clock=SYSTEM_CLOCK))
        reader = RetrievalCache(ttl=300, empty_ttl=30,
                                store=tiered_cache(settings_redis, "passages", clock=SYSTEM_CLOCK))
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
    return reads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3, help="rounds of the path measurement")
    parser.add_argument("--baseline", help="a git ref whose tree runs the same rounds, side by side")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--tiers", action="store_true",
                        help="only the passage cache's tiers (in process, Redis), --runs times: retrieval_tiers.json")
    args = parser.parse_args()
    if args.tiers:
        tiers(args)
        return
    data: dict = {}
    lines = asyncio.run(main_async(args, data))
    command = command_line("retrieval.py", sys.argv[1:])
    packages = ("sentence-transformers", "torch", "onnxruntime", "qdrant-client", "qdrant-edge-py")
    versions = ", ".join(v for v in (machine.version(name) for name in packages) if v)
    when = date.today().isoformat()
    block = "\n".join([f"Command: `{command.strip()}` (MiniLM on the CPU, each tree's embedded store); run of "
                       f"{when} on {machine.machine()}; {versions}", "", *lines, "",
                       "Result file: `docs/retrieval.json`."])
    write_result(Path(args.out), "retrieval", {"date": when, "machine": machine.machine(), "versions": versions,
                                               "command": command.strip(), "runs": args.runs}, data)
    write_block(Path(args.out), "retrieval", block)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
