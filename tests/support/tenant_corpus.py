"""Two tenants' documents for the retrieval and tenant-isolation tests: acme and globex write on the same
topics with different facts (30 vs 60 days to return an item), so a passage that crosses tenants shows
up as the wrong number in the upstream's prompt. Also their ingestion with the real MiniLM embedder, and
a gateway config whose tenants retrieve from it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.embeddings import LocalMiniLM
from proxy.retrieval.ingestion import ingest
from proxy.retrieval.vector_store import VectorStore
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.pdf import text_pdf

DOCS = {
    "acme": {
        "returns.md": "# Returns\n\nAcme customers may return any item within 30 days of delivery for a full "
                      "refund. Items must be unused and in their original packaging.",
        "shipping.md": "# Shipping\n\nAcme ships every order by ground courier. Standard delivery takes 3 to 5 "
                       "business days; express delivery arrives the next business day.",
        "warranty.html": "<html><head><title>Warranty</title><script>track()</script></head><body><h1>Warranty"
                         "</h1><p>Every Acme blender carries a two-year warranty that covers motor failure.</p>"
                         "</body></html>",
    },
    "globex": {
        "returns.md": "# Returns\n\nGlobex customers may return any item within 60 days of delivery for store "
                      "credit. Opened software cannot be returned.",
        "support.txt": "Globex support answers by phone on weekdays from 8 am to 6 pm Central European Time.",
    },
}
PDFS = {  # tenant -> PDF name -> pages of lines
    "globex": {"router-manual.pdf": [["Globex Router Manual"],
                                     ["To reset the Globex router, hold the back button for ten seconds",
                                      "until the light blinks amber."]]},
}
KEYS = {"acme": "sk-acme-test-1", "globex": "sk-globex-test-1"}


def write_documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each tenant's documents in a folder of its own: tenant -> folder."""
    roots = {}
    for tenant, files in DOCS.items():
        root = tmp_path_factory.mktemp(f"docs-{tenant}")
        for name, text in files.items():
            (root / name).write_text(text)
        for name, pages in PDFS.get(tenant, {}).items():
            (root / name).write_bytes(text_pdf(pages))
        roots[tenant] = root
    return roots


def load_corpus(roots: dict[str, Path], open_store: Callable[[int], VectorStore]) -> None:
    """Ingest both tenants' documents into collection "docs" of the store ``open_store`` opens."""

    async def load() -> None:
        embedder = LocalMiniLM()
        store = open_store(embedder.dimensions)
        try:
            for tenant, root in roots.items():
                await ingest([str(root)], tenant=tenant, collection="docs", embedder=embedder, store=store,
                             chunk_tokens=64, chunk_overlap=8, progress=False)
            again = await ingest([str(roots["acme"])], tenant="acme", collection="docs", embedder=embedder,
                                 store=store, chunk_tokens=64, chunk_overlap=8, progress=False)
            assert again.replaced == again.chunks == 3  # re-ingesting replaced, it did not duplicate
            assert await store.count("docs", "acme") == 3 and await store.count("docs", "globex") == 3
        finally:
            await store.aclose()
            await embedder.aclose()

    asyncio.run(load())


def ingested_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ingest both tenants' documents into one collection under a fresh data dir; returns the dir."""
    data_dir = tmp_path_factory.mktemp("retrieval-data")
    load_corpus(write_documents(tmp_path_factory),
                lambda dimensions: EdgeStore.open(data_dir / "qdrant", dimensions=dimensions))
    return data_dir


def config(fake: FakeServer, data_dir: Path, **retrieval: object) -> dict[str, object]:
    """Both tenants, keyed, retrieving from collection "docs" under ``data_dir`` before ``fake`` answers."""
    return {
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()]},
        "data_dir": str(data_dir),
        "tenants": {tenant: {"retrieval": {"collection": "docs", **retrieval}} for tenant in KEYS},
    }
