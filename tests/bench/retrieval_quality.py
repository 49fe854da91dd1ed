"""Retrieval quality on the help-center corpus: recall@1, @3, @5 and MRR by class of question, for
dense search (MiniLM), BM25 and their fusion (weighted RRF with several weights, dense first), each with the
pages ingested whole and with their boilerplate left out.

Everything runs through the product: ``prefixgate ingest``'s ``Ingestion`` (its chunker at the default
size, boilerplate judged over the collection, the shared copy of it) into the embedded store
(``EdgeStore``: Qdrant's engine, a dense and a BM25 vector per chunk, IDF applied by the engine), and
``EdgeStore.search`` with each ``SearchMode``, as the retriever asks it. Real parts: all-MiniLM-L6-v2 on
the CPU. The corpus is tests/support/helpcenter.py: 52 pages that share four paragraphs of header,
navigation and footer, with near-duplicate articles, and 208 questions in three classes (worded like the
article, keyword, paraphrased with no content word in common). A question is found at rank r when its
article is the r-th distinct document among the hits. The engine breaks score ties in either order, so the
result is the median of several runs.

    python tests/bench/retrieval_quality.py [--runs 3] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from datetime import date
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.retrieval.boilerplate import DEFAULT_RULE  # noqa: E402
from proxy.config.retrieval import RetrievalConfig  # noqa: E402
from proxy.retrieval.edge_store import EdgeStore  # noqa: E402
from proxy.retrieval.embeddings import LocalMiniLM  # noqa: E402
from proxy.retrieval.ingestion import Ingestion  # noqa: E402
from proxy.retrieval.vector_store import SearchMode  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402
from tests.support.helpcenter import ARTICLES, CLASSES, Question, content_words, questions  # noqa: E402

CANDIDATES = 20  # hits fetched per search, as retrieval.candidates' default
# name -> the search mode; fusion is Qdrant's weighted RRF at k = 2, where a BM25 weight under 1 lets keyword
# hits move a document up a rank or two instead of outranking dense search.
MODES: dict[str, SearchMode] = {
    "dense": SearchMode(1.0, 0.0), "bm25": SearchMode(0.0, 1.0), "rrf 1:1": SearchMode(1.0, 1.0),
    "rrf 1:0.5": SearchMode(1.0, 0.5), "rrf 1:0.25": SearchMode(1.0, 0.25), "rrf 1:0.1": SearchMode(1.0, 0.1),
    "rrf 1:0.05": SearchMode(1.0, 0.05)}


def check_paraphrases(asked: list[Question]) -> None:
    """A paraphrase that shares a content word with its article is not one; refuse to measure."""
    bodies = {article.slug: content_words(" ".join((article.title, *article.body))) for article in ARTICLES}
    for question in asked:
        shared = content_words(question.text) & bodies[question.answer] if question.kind == "paraphrase" else set()
        if shared:
            sys.exit(f"paraphrase shares {sorted(shared)} with {question.answer}: {question.text}")


async def build(folder: Path, strip: bool, embedder: LocalMiniLM) -> EdgeStore:
    """The pages as ``prefixgate ingest`` stores them, one file per article, with or without boilerplate removal."""
    pages = folder / ("stripped" if strip else "whole")
    pages.mkdir()
    for article in ARTICLES:
        (pages / f"{article.slug}.md").write_text(article.page())
    store = EdgeStore.open(folder / f"qdrant-{pages.name}", dimensions=embedder.dimensions)
    settings = RetrievalConfig()
    ingestion = Ingestion(store, embedder, collection="help", tenant="bench", chunk_tokens=settings.chunk_tokens,
                          chunk_overlap=settings.chunk_overlap, boilerplate=DEFAULT_RULE if strip else None)
    await ingestion.add([str(pages)], progress=False)
    return store


async def ranked_documents(store: EdgeStore, mode: SearchMode, vector: list[float], question: str) -> list[str]:
    """The distinct documents of the hits, best first, named by their article's slug."""
    documents: list[str] = []
    for hit in await store.search("help", "bench", vector, CANDIDATES, text=question, mode=mode):
        document = Path(hit.doc_id).stem
        if document not in documents:
            documents.append(document)
    return documents


def scores(ranks: list[int | None]) -> dict[str, float]:
    found = [rank for rank in ranks if rank is not None]
    return {"recall@1": sum(rank <= 1 for rank in found) / len(ranks),
            "recall@3": sum(rank <= 3 for rank in found) / len(ranks),
            "recall@5": sum(rank <= 5 for rank in found) / len(ranks),
            "mrr": sum(1 / rank for rank in found) / len(ranks), "questions": len(ranks)}


async def evaluate() -> dict[str, Any]:
    asked = questions()
    check_paraphrases(asked)
    embedder = LocalMiniLM()
    folder = Path(tempfile.mkdtemp(prefix="pg-quality-"))
    dense = await embedder.embed([question.text for question in asked])
    results: dict[str, Any] = {}
    for strip in (False, True):
        ingest = "boilerplate removed" if strip else "whole pages"
        store = await build(folder, strip, embedder)
        chunks = await store.count("help", "bench")
        for name, mode in MODES.items():
            ranks: dict[str, list[int | None]] = {kind: [] for kind in CLASSES}
            for question, vector in zip(asked, dense, strict=True):
                documents = await ranked_documents(store, mode, vector, question.text)
                rank = documents.index(question.answer) + 1 if question.answer in documents else None
                ranks[question.kind].append(rank)
            everything = [rank for kind in CLASSES for rank in ranks[kind]]
            results[f"{name} | {ingest}"] = {"mode": name, "ingest": ingest, "chunks": chunks,
                                             "all": scores(everything),
                                             **{kind: scores(ranks[kind]) for kind in CLASSES}}
        await store.aclose()
    await embedder.aclose()
    return results


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each cell's median over the runs, and the range of overall R@3 (``r3_range``)."""
    merged: dict[str, Any] = {}
    for key, first in runs[0].items():
        row = {"mode": first["mode"], "ingest": first["ingest"], "chunks": first["chunks"]}
        for group in ("all", *CLASSES):
            row[group] = {metric: median(run[key][group][metric] for run in runs) for metric in first[group]}
        overall = [run[key]["all"]["recall@3"] for run in runs]
        row["r3_range"] = [min(overall), max(overall)]
        merged[key] = row
    return merged


def table(results: dict[str, Any]) -> str:
    head = ("| search | ingest | chunks | all: R@1 / R@3 [range] / R@5 / MRR | worded R@3 | keyword R@3 | "
            "paraphrase R@3 |\n|---|---|---|---|---|---|---|")
    rows = []
    for row in results.values():
        every, (low, high) = row["all"], row["r3_range"]
        rows.append(f"| {row['mode']} | {row['ingest']} | {row['chunks']} | {every['recall@1']:.3f} / "
                    f"{every['recall@3']:.3f} [{low:.3f}, {high:.3f}] / {every['recall@5']:.3f} / {every['mrr']:.3f} | "
                    + " | ".join(f"{row[kind]['recall@3']:.3f}" for kind in CLASSES) + " |")
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3, help="fresh ingests and searches; ties may rank either way")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    runs = [asyncio.run(evaluate()) for _ in range(args.runs)]
    results = medians(runs)
    command = command_line("retrieval_quality.py", sys.argv[1:])
    packages = ("sentence-transformers", "torch", "onnxruntime", "qdrant-edge-py")
    versions = ", ".join(v for v in (machine.version(name) for name in packages) if v)
    when = date.today().isoformat()
    counts = {kind: sum(question.kind == kind for question in questions()) for kind in CLASSES}
    block = "\n".join([
        f"Command: `{command.strip()}`; run of {when} on {machine.machine()}; {versions}. "
        f"{len(ARTICLES)} help-center pages, {sum(counts.values())} questions "
        f"({', '.join(f'{n} {kind}' for kind, n in counts.items())}); {CANDIDATES} candidates per search; "
        f"R@k: the answering article among the first k distinct documents; MRR over the candidates. Median of "
        f"{args.runs} runs, each from a fresh ingest (the engine breaks ties in either order, which moves the "
        "fusions with a heavy BM25 weight by a question or two); the range of overall R@3 in brackets.", "",
        table(results), "", "Result file: `docs/retrieval_quality.json`."])
    write_result(Path(args.out), "retrieval_quality", {"date": when, "machine": machine.machine(),
                                                       "versions": versions, "command": command.strip(),
                                                       "runs": runs}, results)
    write_block(Path(args.out), "retrieval_quality", block)
    print(table(results))


if __name__ == "__main__":
    main()
