"""Ingestion against the embedded store: boilerplate is judged over the tenant's whole collection, and
every stored document follows the current judgement, whatever order documents came and went in; the
chunks it stores, titles and all, are what evidence selection dedupes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from policies.retrieval.boilerplate import DEFAULT_RULE, BoilerplateRule
from policies.retrieval.evidence import EvidencePolicy, select_evidence
from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.ingestion import SHARED_ID, Ingestion
from proxy.retrieval.reading import document_id
from proxy.retrieval.vector_store import VectorStore
from tests.support.embedders import CountingEmbedder

FOOTER = "Questions? Write to help@acme.example, any day of the week, and we answer within a day."
T = TypeVar("T")


def write(root: Path, *names: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / f"{name}.md").write_text(f"# {name}\n\nWhat only the {name} page says.\n\n{FOOTER}\n")
    return root


def with_store(tmp_path: Path, work: Callable[[VectorStore], Awaitable[T]]) -> T:
    async def run() -> T:
        store = EdgeStore.open(tmp_path / "qdrant", dimensions=1)
        try:
            return await work(store)
        finally:
            await store.aclose()

    return asyncio.run(run())


def ingestion(store: VectorStore, tenant: str = "acme", rule: BoilerplateRule | None = DEFAULT_RULE) -> Ingestion:
    return Ingestion(store, CountingEmbedder(), collection="docs", tenant=tenant, chunk_tokens=64, chunk_overlap=8,
                     boilerplate=rule)


async def stored_texts(store: VectorStore, tenant: str = "acme") -> dict[str, str]:
    """Each stored page's chunks as one text, by file name; the shared copy of the boilerplate under "shared"."""
    texts: dict[str, str] = {}
    for chunk in sorted(await store.search("docs", tenant, [1.0], 200), key=lambda c: (c.doc_id, c.index)):
        name = "shared" if chunk.doc_id == SHARED_ID else Path(chunk.doc_id).stem
        texts[name] = texts.get(name, "") + chunk.text
    return texts


def test_a_footer_that_becomes_common_leaves_the_documents_ingested_before_it_did(tmp_path: Path) -> None:
    async def work(store: VectorStore) -> None:
        first = await ingestion(store).add([str(write(tmp_path / "one", "pricing", "refunds"))], progress=False)
        assert first.boilerplate == 0  # two pages are not enough to call anything boilerplate
        assert all(FOOTER in text for text in (await stored_texts(store)).values())
        second = await ingestion(store).add([str(write(tmp_path / "two", "trial", "invoices"))], progress=False)
        assert (second.documents, second.boilerplate, second.rechunked) == (2, 1, 2)
        texts = await stored_texts(store)
        assert texts.pop("shared") == FOOTER  # kept once, so a question about it still finds it
        assert sorted(texts) == ["invoices", "pricing", "refunds", "trial"]
        for name, text in texts.items():
            assert FOOTER not in text and f"What only the {name} page says." in text

    with_store(tmp_path, work)


def test_removing_pages_until_the_footer_is_rare_puts_it_back_in_the_rest(tmp_path: Path) -> None:
    root = write(tmp_path / "docs", "pricing", "refunds", "trial", "invoices")

    async def work(store: VectorStore) -> None:
        assert (await ingestion(store).add([str(root)], progress=False)).boilerplate == 1
        for name in ("trial", "invoices"):
            assert await ingestion(store).remove(document_id(root / f"{name}.md")) == 1
        texts = await stored_texts(store)
        assert sorted(texts) == ["pricing", "refunds"]  # no shared copy: nothing is boilerplate any more
        assert all(FOOTER in text for text in texts.values())

    with_store(tmp_path, work)


def test_another_tenants_pages_do_not_make_a_tenants_paragraph_boilerplate(tmp_path: Path) -> None:
    async def work(store: VectorStore) -> None:
        await ingestion(store, "globex").add([str(write(tmp_path / "globex", "a", "b", "c", "d"))], progress=False)
        report = await ingestion(store, "acme").add([str(write(tmp_path / "acme", "pricing", "refunds"))],
                                                    progress=False)
        assert report.boilerplate == 0
        assert all(FOOTER in text for text in (await stored_texts(store, "acme")).values())
        globex = await stored_texts(store, "globex")
        assert globex.pop("shared") == FOOTER and all(FOOTER not in text for text in globex.values())

    with_store(tmp_path, work)


def test_the_shared_copy_follows_the_collection_and_is_not_stored_again_unchanged(tmp_path: Path) -> None:
    header = "Acme Help Center: guides and answers."

    async def work(store: VectorStore) -> None:
        await ingestion(store).add([str(write(tmp_path / "one", "a", "b", "c"))], progress=False)
        assert (await stored_texts(store))["shared"] == FOOTER
        again = ingestion(store)
        await again.add([str(write(tmp_path / "two", "d"))], progress=False)
        assert again.embedder.calls == [[(tmp_path / "two" / "d.md").read_text().split("\n\n")[0]
                                                  + "\n\nWhat only the d page says."]]  # the shared copy is as it was
        root = tmp_path / "three"
        root.mkdir()
        for name in ("e", "f", "g", "h"):
            (root / f"{name}.md").write_text(f"{header}\n\n# {name}\n\nWhat only {name} says.\n\n{FOOTER}\n")
        await ingestion(store).add([str(root)], progress=False)
        assert (await stored_texts(store))["shared"] == f"{FOOTER}\n\n{header}"

    with_store(tmp_path, work)


def test_with_boilerplate_off_every_paragraph_is_indexed(tmp_path: Path) -> None:
    root = write(tmp_path / "docs", "pricing", "refunds", "trial", "invoices")

    async def work(store: VectorStore) -> None:
        report = await ingestion(store, rule=None).add([str(root)], progress=False)
        assert report.boilerplate == 0
        assert all(FOOTER in text for text in (await stored_texts(store)).values())

    with_store(tmp_path, work)


def test_a_page_and_its_copy_under_another_title_give_one_passage(tmp_path: Path) -> None:
    """Boilerplate left out, a page's chunk is its title and a few sentences: the copy differs by the title."""
    body = ("Open the sign-in page and choose Forgot password. Enter the email address of your account and we send "
            "a link that stays valid for one hour. The new password needs at least twelve characters.")
    pages = {"reset": ("Reset your password", body), "reset-copy": ("Forgotten password", body),
             "trial": ("Free trial", "The free trial lasts fourteen days and needs no card."),
             "invoices": ("Invoices", "Invoices are sent on the first day of each month by email.")}
    root = tmp_path / "site"
    root.mkdir()
    for name, (title, text) in pages.items():
        (root / f"{name}.html").write_text(f"<html><head><title>{title} | Acme Help</title></head><body>"
                                           f"<p>Acme Help Center: guides and answers.</p><h1>{title}</h1>"
                                           f"<p>{text}</p><p>{FOOTER}</p></body></html>")

    async def work(store: VectorStore) -> list[str]:
        await ingestion(store).add([str(root)], progress=False)
        hits = await store.search("docs", "acme", [1.0], 200)
        passages = select_evidence(hits, EvidencePolicy(top_n=10), lambda text: len(text.split()))
        return sorted(Path(p.doc_id).stem for p in passages if p.doc_id != SHARED_ID)

    assert with_store(tmp_path, work) in (["invoices", "reset", "trial"], ["invoices", "reset-copy", "trial"])
