"""Retrieval quality on the labelled corpus: the document that answers a question is in the top 5."""

from __future__ import annotations

import asyncio
from pathlib import Path

from proxy.retrieval.embeddings import LocalMiniLM
from proxy.retrieval.ingestion import ingest
from proxy.retrieval.vector_store import VectorStore
from tests.support.corpus import DOCUMENTS, write_corpus


def test_recall_at_5_on_paraphrased_questions(tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "northwind")

    async def measure() -> tuple[float, float]:
        embedder = LocalMiniLM()
        store = VectorStore.open(dimensions=embedder.dimensions, path=tmp_path / "qdrant")
        try:
            await ingest([str(root)], tenant="northwind", collection="docs", embedder=embedder, store=store,
                         chunk_tokens=200, chunk_overlap=32, progress=False)
            questions = [question for _, _, question in DOCUMENTS]
            vectors = await embedder.embed(questions)
            found_at_5 = found_at_1 = 0
            for (name, _, _), vector in zip(DOCUMENTS, vectors, strict=True):
                hits = await store.search("docs", "northwind", vector, 5)
                documents = [hit.doc_id.rsplit("/", 1)[-1] for hit in hits]
                found_at_5 += name in documents
                found_at_1 += documents[:1] == [name]
            return found_at_5 / len(DOCUMENTS), found_at_1 / len(DOCUMENTS)
        finally:
            await store.aclose()
            await embedder.aclose()

    recall_5, recall_1 = asyncio.run(measure())
    print(f"recall@5 {recall_5:.2f}, recall@1 {recall_1:.2f}")
    assert recall_5 >= 0.9
