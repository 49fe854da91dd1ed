"""Evidence order and the engine's prefix cache: stable (document, position) vs score order (issue 4).

A support assistant answers from the 50-document labelled corpus (tests/support/corpus.py). Users ask
each question in several wordings, as they do; each wording retrieves an overlapping set of passages
(real MiniLM + Qdrant local mode, prefixgate's selection), often the same set in another score order.
Every request is the same system preamble, then the evidence block, then the question, sent one
after another to a real vLLM CPU engine with prefix caching, in one seeded random order:
  * stable:  passages in prefixgate's order (document, then position), as the gateway renders them;
  * score:   the same passages best-first, as a RAG app that concatenates its hits would send them.
Before each cell the engine's prefix cache is reset. Reported: vLLM's own hit rate (token deltas of
vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total), the client's TTFT, and how the
retrieved sets overlapped. Writes a table into docs/benchmarks.md.

    python tests/bench/evidence_order.py [--wordings 4] [--rounds 2] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.retrieval.evidence import EvidencePolicy, Passage, render_evidence, select_evidence, with_evidence  # noqa: E402
from proxy.retrieval.edge_store import EdgeStore  # noqa: E402
from proxy.retrieval.embeddings import LocalMiniLM  # noqa: E402
from proxy.retrieval.ingestion import ingest  # noqa: E402
from proxy.retrieval.retriever import passage_budget_tokens  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.prefix_reuse import run_cell, start_engine_on_own_core, summarize  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402
from tests.support.corpus import DOCUMENTS, write_corpus  # noqa: E402

SYSTEM = (
    "You are Northwind's internal help desk assistant. Answer from the retrieved context only, cite the "
    "passage numbers you used in square brackets, and say so plainly when the context does not hold the "
    "answer. Keep answers under five sentences, use the company's own names for tools and places, and never "
    "guess dates, amounts or names. When a question concerns pay, leave or health, add that the employee "
    "handbook is the binding source. "
) * 3
WORDINGS = ("{q}", "Quick question: {q}", "{q} Thanks in advance!", "Could you tell me this? {q}",
            "Hi there. {q}", "{q} I could not find it on the intranet.")


async def retrieve_all(questions: list[str], top_n: int, workdir: Path) -> list[list[Passage]]:
    """Each question's selected passages in prefixgate's stable order, from a freshly ingested corpus."""
    embedder = LocalMiniLM()
    store = EdgeStore.open(workdir / "qdrant", dimensions=embedder.dimensions)
    try:
        await ingest([str(write_corpus(workdir / "docs"))], tenant="bench", collection="docs", embedder=embedder,
                     store=store, chunk_tokens=200, chunk_overlap=32, progress=False)
        policy = EvidencePolicy(top_n=top_n, budget_tokens=1500)
        vectors = await embedder.embed(questions)
        return [select_evidence(await store.search("docs", "bench", vector, 20), policy, passage_budget_tokens)
                for vector in vectors]
    finally:
        await store.aclose()
        await embedder.aclose()


def request(question: str, passages: list[Passage]) -> dict[str, Any]:
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}
    return with_evidence(body, render_evidence(passages))


def overlap_stats(sets: list[list[Passage]]) -> dict[str, float]:
    """How the retrieved sets relate: same set as an earlier request, and same set in another score order."""
    seen: set[frozenset[str]] = set()
    repeated = reordered = 0
    for passages in sets:
        key = frozenset(p.doc_id for p in passages)
        if key in seen:
            repeated += 1
        seen.add(key)
        by_score = [p.doc_id for p in sorted(passages, key=lambda p: -p.score)]
        reordered += by_score != [p.doc_id for p in passages]
    return {"requests": len(sets), "distinct_sets": len(seen), "repeated_set": repeated / len(sets),
            "score_order_differs": reordered / len(sets)}


def markdown(results: list[dict[str, Any]], stats: dict[str, float], meta: dict[str, Any]) -> str:
    by = {r["order"]: r for r in results}
    lines = [
        f"Run of {meta['date']} on {meta['where']}; {meta['requests']} requests per cell ({meta['questions']} "
        f"questions x {meta['wordings']} wordings, seeded random order), {meta['rounds']} rounds from a cold "
        f"cache, top {meta['top_n']} passages, engine block size {meta['block_size']} tokens.",
        "",
        f"Retrieved sets: {stats['distinct_sets']:.0f} distinct among {stats['requests']:.0f} requests; "
        f"{stats['repeated_set']:.0%} of requests retrieved a set an earlier request had, and for "
        f"{stats['score_order_differs']:.0%} the score order differs from the stable order.",
        "",
        "| evidence order | prompt tokens | hit rate | hit rate past the preamble | TTFT mean (ms) | TTFT p50 (ms) "
        "| TTFT p95 (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for order in ("stable", "score"):
        r = by[order]
        lines.append(f"| {order} | {r['prompt_tokens']:.0f} | {r['hit_rate']:.3f} | {r['hit_rate_past_preamble']:.3f} "
                     f"| {r['ttft_mean_ms']:.1f} "
                     f"| {r['ttft_p50_ms']:.1f} | {r['ttft_p95_ms']:.1f} |")
    ratio = by["score"]["ttft_mean_ms"] / by["stable"]["ttft_mean_ms"]
    lines += ["", f"Stable order: hit rate {by['stable']['hit_rate']:.3f} vs {by['score']['hit_rate']:.3f} in score "
              f"order ({by['stable']['hit_rate_past_preamble']:.3f} vs {by['score']['hit_rate_past_preamble']:.3f} "
              f"past the {by['stable']['preamble_tokens']} preamble tokens, whose full blocks both orders reuse); "
              f"score order's TTFT mean is {ratio:.2f}x the stable order's."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wordings", type=int, default=4, choices=range(1, len(WORDINGS) + 1))
    parser.add_argument("--top-n", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output-tokens", type=int, default=4)
    parser.add_argument("--model", default="prefixgate-tiny")
    parser.add_argument("--where", help="the caption's machine and engine (default: detected at run time)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="evidence-order-"))
    rng = random.Random(5)
    asked = [wording.format(q=question) for _, _, question in DOCUMENTS for wording in WORDINGS[:args.wordings]]
    rng.shuffle(asked)
    stable_sets = asyncio.run(retrieve_all(asked, args.top_n, workdir))
    stats = overlap_stats(stable_sets)
    print(json.dumps(stats), flush=True)
    orders = {
        "stable": [request(q, passages) for q, passages in zip(asked, stable_sets, strict=True)],
        "score": [request(q, sorted(passages, key=lambda p: -p.score))
                  for q, passages in zip(asked, stable_sets, strict=True)],
    }
    engine = start_engine_on_own_core(args.model, workdir)
    results = []
    try:
        with httpx.Client(timeout=120) as client:
            base = engine.origin + "/v1"
            for body in orders["stable"][:3]:  # one-off start-up costs stay out of the cells
                run_cell(client, engine.origin, base, lambda _, body=body: body, 1, args.model, args.output_tokens)
            metrics = client.get(engine.origin + "/metrics").text
            block_size = next((line.split('block_size="')[1].split('"')[0] for line in metrics.splitlines()
                               if line.startswith("vllm:cache_config_info") and 'block_size="' in line), "?")
            totals: dict[str, tuple[list[float], float, float]] = {}
            for _ in range(args.rounds):
                for order, bodies in orders.items():
                    samples, hits, queries = run_cell(client, engine.origin, base, bodies.__getitem__, len(bodies),
                                                      args.model, args.output_tokens)
                    before = totals.get(order, ([], 0.0, 0.0))
                    totals[order] = (before[0] + samples, before[1] + hits, before[2] + queries)
            # Both orders share the preamble's full blocks on every request after a cell's first: rate
            # the rest apart, since that is where the order of the evidence can matter.
            preamble = client.post(engine.origin + "/tokenize", json={
                "model": args.model, "messages": [{"role": "system", "content": SYSTEM}],
                "add_generation_prompt": False}).json()["count"]
            shared = preamble // int(block_size) * int(block_size) if block_size.isdigit() else 0
            for order, (samples, hits, queries) in totals.items():
                results.append({"order": order, **summarize(samples, hits, queries, len(asked) * args.rounds),
                                "hit_rate_past_preamble": (hits - shared * (len(asked) - 1) * args.rounds)
                                / (queries - shared * len(asked) * args.rounds),
                                "preamble_tokens": preamble})
                print(json.dumps(results[-1]), flush=True)
    finally:
        engine.stop()
    where = args.where or (f"{machine.machine()} (engine process on one core; retrieval and client on the others), "
                           f"{machine.vllm_version()}, tiny model")
    meta = {"date": datetime.now().strftime("%Y-%m-%d"), "where": where, "requests": len(asked),
            "questions": len(DOCUMENTS), "wordings": args.wordings, "rounds": args.rounds, "top_n": args.top_n,
            "block_size": block_size}
    table = markdown(results, stats, meta)
    print(table)
    command = command_line("evidence_order.py", sys.argv[1:])
    write_result(Path(args.out), "evidence_order", {**meta, "command": command}, {"overlap": stats, "cells": results})
    write_block(Path(args.out), "evidence_order",
                f"Command: `{command}`\n\n{table}\n\nResult file: `docs/evidence_order.json`.")


if __name__ == "__main__":
    main()
