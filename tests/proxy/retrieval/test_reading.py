"""Reading documents for ingest: the visible text of HTML, the text layer of PDFs, and what an
unreadable one does to a run (it is skipped with its reason; the rest goes in)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.ingestion import IngestReport, ingest
from proxy.retrieval.reading import html_text
from tests.support.embedders import CountingEmbedder


def test_an_unreadable_pdf_is_skipped_with_its_reason_and_the_rest_goes_in(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("Plain text that goes in.")
    (tmp_path / "damaged.pdf").write_bytes(b"%PDF-1.4\nthis is not a PDF body at all")

    async def run() -> IngestReport:
        store = EdgeStore.open(tmp_path / "qdrant", dimensions=1)
        try:
            return await ingest([str(tmp_path)], tenant="t", collection="docs", embedder=CountingEmbedder(),
                                store=store, chunk_tokens=64, chunk_overlap=8, progress=False)
        finally:
            await store.aclose()

    report = asyncio.run(run())
    assert report.documents == 1 and len(report.skipped) == 1
    assert "damaged.pdf" in report.skipped[0] and "not a readable PDF" in report.skipped[0]


def test_html_text_keeps_blocks_apart_and_drops_scripts() -> None:
    html = "<p>One&amp;two</p><div>Three<br>Four</div><style>p{}</style><script>x()</script>"
    assert html_text(html) == "One&two\n\nThree\n\nFour"
