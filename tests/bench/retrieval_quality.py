"""Retrieval quality on the help-center corpus: recall@1, @3, @5 and MRR by class of question, for
dense search (MiniLM), BM25 and their fusion (RRF with several weights, dense first; DBSF), each with the pages ingested
whole and with their boilerplate left out.

Real parts: all-MiniLM-L6-v2 on the CPU, BM25 sparse vectors from Qdrant's own embedder
(``qdrant_edge.Bm25``, IDF applied by the collection), Qdrant local mode for every search, and
prefixgate's chunker at its default size. The corpus is tests/support/helpcenter.py: 52 pages that
share four paragraphs of header, navigation and footer, with near-duplicate articles, and 208
questions in three classes (worded like the article, keyword, paraphrased with no content word in
common). A question is found at rank r when its article is the r-th distinct document among the
hits. Everything is deterministic, so one run is the result.

    python tests/bench/retrieval_quality.py [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from qdrant_client import QdrantClient, models  # noqa: E402
from qdrant_edge import Bm25  # noqa: E402

from policies.boilerplate import (  # noqa: E402
    BoilerplateRule,
    count_documents,
    document_keys,
    keyed_paragraphs,
    repeated_keys,
    without_boilerplate,
)
from policies.chunking import chunk_spans  # noqa: E402
from proxy.config.retrieval import RetrievalConfig  # noqa: E402
from proxy.retrieval.embeddings import LocalMiniLM  # noqa: E402
from proxy.retrieval.ingestion import SHARED_ID, tokenizer_offsets  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402
from tests.support.helpcenter import ARTICLES, CLASSES, Question, content_words, questions  # noqa: E402

CANDIDATES = 20  # hits fetched per search, as retrieval.candidates' default
# name -> (dense weight, BM25 weight) of Qdrant's weighted RRF (k = 2, Qdrant's default), which scores a hit at
# position p of a source of weight w as 1 / (p / w + k - 1): a weight stretches or shrinks a source's ranks, so a
# BM25 weight under 1 lets keyword hits move a document up a rank or two instead of outranking dense search.
# None: that search alone, or DBSF (distribution-based score fusion).
MODES: dict[str, tuple[float, float] | None] = {
    "dense": None, "bm25": None, "rrf 1:1": (1.0, 1.0), "rrf 1:0.5": (1.0, 0.5), "rrf 1:0.25": (1.0, 0.25),
    "rrf 1:0.1": (1.0, 0.1), "dbsf": None}


def check_paraphrases(asked: list[Question]) -> None:
    """A paraphrase that shares a content word with its article is not one; refuse to measure."""
    bodies = {article.slug: content_words(" ".join((article.title, *article.body))) for article in ARTICLES}
    for question in asked:
        shared = content_words(question.text) & bodies[question.answer] if question.kind == "paraphrase" else set()
        if shared:
            sys.exit(f"paraphrase shares {sorted(shared)} with {question.answer}: {question.text}")


def pages(strip: bool) -> dict[str, str]:
    """slug -> the text that is chunked, embedded and indexed; with ``strip``, as ``prefixgate ingest`` stores
    them: each page without its boilerplate, and one copy of the boilerplate as a document of its own."""
    texts = {article.slug: article.page() for article in ARTICLES}
    if not strip:
        return texts
    keys = {slug: document_keys(text) for slug, text in texts.items()}
    repeated = repeated_keys(count_documents(keys.values()), len(texts), BoilerplateRule())
    shared: dict[str, str] = {}
    for text in texts.values():
        shared.update((key, paragraph) for key, paragraph in keyed_paragraphs(text).items()
                      if key in repeated and key not in shared)
    stripped = {slug: without_boilerplate(text, repeated) for slug, text in texts.items()}
    return {**stripped, SHARED_ID: "\n\n".join(shared.values())}


async def build(client: QdrantClient, name: str, texts: dict[str, str], embedder: LocalMiniLM, bm25: Bm25) -> int:
    settings = RetrievalConfig()
    offsets = tokenizer_offsets(embedder)
    chunks = [(slug, text[start:end]) for slug, text in texts.items()
              for start, end in chunk_spans(text, offsets(text), settings.chunk_tokens, settings.chunk_overlap)]
    vectors = await embedder.embed([text for _, text in chunks])
    client.create_collection(name, vectors_config={"dense": models.VectorParams(size=embedder.dimensions,
                                                                                distance=models.Distance.COSINE)},
                             sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)})
    points = []
    for number, ((slug, text), vector) in enumerate(zip(chunks, vectors, strict=True)):
        sparse = bm25.embed_document(text)
        points.append(models.PointStruct(id=number, payload={"doc": slug}, vector={
            "dense": vector, "bm25": models.SparseVector(indices=sparse.indices, values=sparse.values)}))
    client.upsert(name, points)
    return len(chunks)


def search(client: QdrantClient, name: str, mode: str, dense: list[float], sparse: models.SparseVector) -> list[str]:
    """The distinct documents of the hits, best first."""
    weights = MODES[mode]
    if mode == "dense":
        points = client.query_points(name, query=dense, using="dense", limit=CANDIDATES).points
    elif mode == "bm25":
        points = client.query_points(name, query=sparse, using="bm25", limit=CANDIDATES).points
    else:
        prefetch = [models.Prefetch(query=dense, using="dense", limit=CANDIDATES),
                    models.Prefetch(query=sparse, using="bm25", limit=CANDIDATES)]
        fusion: models.Query = (models.FusionQuery(fusion=models.Fusion.DBSF) if weights is None
                                else models.RrfQuery(rrf=models.Rrf(weights=list(weights), k=2)))
        points = client.query_points(name, prefetch=prefetch, limit=CANDIDATES, query=fusion).points
    documents: list[str] = []
    for point in points:
        document = (point.payload or {})["doc"]
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
    embedder, bm25 = LocalMiniLM(), Bm25()
    client = QdrantClient(path=tempfile.mkdtemp(prefix="pg-quality-"))
    dense = await embedder.embed([question.text for question in asked])
    sparse = [bm25.embed_query(question.text) for question in asked]
    results: dict[str, Any] = {}
    for strip in (False, True):
        ingest = "boilerplate removed" if strip else "whole pages"
        collection = "stripped" if strip else "whole"
        chunks = await build(client, collection, pages(strip), embedder, bm25)
        for mode in MODES:
            ranks: dict[str, list[int | None]] = {kind: [] for kind in CLASSES}
            for question, vector, terms in zip(asked, dense, sparse, strict=True):
                query = models.SparseVector(indices=terms.indices, values=terms.values)
                documents = search(client, collection, mode, vector, query)
                rank = documents.index(question.answer) + 1 if question.answer in documents else None
                ranks[question.kind].append(rank)
            everything = [rank for kind in CLASSES for rank in ranks[kind]]
            results[f"{mode} | {ingest}"] = {"mode": mode, "ingest": ingest, "chunks": chunks,
                                             "all": scores(everything),
                                             **{kind: scores(ranks[kind]) for kind in CLASSES}}
    client.close()
    await embedder.aclose()
    return results


def table(results: dict[str, Any]) -> str:
    head = ("| search | ingest | chunks | all: R@1 / R@3 / R@5 / MRR | worded R@3 | keyword R@3 | paraphrase R@3 |\n"
            "|---|---|---|---|---|---|---|")
    rows = []
    for row in results.values():
        every = row["all"]
        rows.append(f"| {row['mode']} | {row['ingest']} | {row['chunks']} | {every['recall@1']:.3f} / "
                    f"{every['recall@3']:.3f} / {every['recall@5']:.3f} / {every['mrr']:.3f} | "
                    + " | ".join(f"{row[kind]['recall@3']:.3f}" for kind in CLASSES) + " |")
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    results = asyncio.run(evaluate())
    command = "python tests/bench/retrieval_quality.py " + " ".join(sys.argv[1:])
    packages = ("sentence-transformers", "torch", "qdrant-client", "qdrant-edge-py")
    versions = ", ".join(v for v in (machine.version(name) for name in packages) if v)
    when = date.today().isoformat()
    counts = {kind: sum(question.kind == kind for question in questions()) for kind in CLASSES}
    block = "\n".join([
        f"Command: `{command.strip()}`; run of {when} on {machine.machine()}; {versions}. "
        f"{len(ARTICLES)} help-center pages, {sum(counts.values())} questions "
        f"({', '.join(f'{n} {kind}' for kind, n in counts.items())}); {CANDIDATES} candidates per search; "
        "R@k: the answering article among the first k distinct documents; MRR over the candidates.", "",
        table(results), "", "Result file: `docs/retrieval_quality.json`."])
    write_result(Path(args.out), "retrieval_quality", {"date": when, "machine": machine.machine(),
                                                       "versions": versions, "command": command.strip()}, results)
    write_block(Path(args.out), "retrieval_quality", block)
    print(table(results))


if __name__ == "__main__":
    main()
