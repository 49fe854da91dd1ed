"""`prefixgate ingest`: documents on disk -> token-bounded chunks -> embeddings -> Qdrant.

Chunk IDs come from tenant, document and position (``policies.chunking.chunk_id``), and a
document's old chunks are removed before its new ones go in, so ingesting again replaces: no
duplicates, and no stale tail when a document got shorter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from tqdm import tqdm

from policies.chunking import chunk_id, chunk_spans
from proxy.auth.keys import OPEN_TENANT
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.vector_store import StoredChunk, StoreInUse, VectorStore

SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")
EMBED_BATCH = 64
_WORDISH = re.compile(r"\s*\S+")


class _TextOfHTML(HTMLParser):
    """Visible text of an HTML page; block elements become line breaks, scripts and styles vanish."""

    _BLOCKS = frozenset({"p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr",
                         "table", "section", "article", "pre", "blockquote", "title"})
    _HIDDEN = frozenset({"script", "style", "head", "noscript", "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self._HIDDEN and tag != "head":
            self._hidden += 1
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN and tag != "head":
            self._hidden = max(0, self._hidden - 1)
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _TextOfHTML()
    parser.feed(html)
    parser.close()
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    return re.sub(r"\s*\n\s*\n\s*", "\n\n", text).strip()


class UnreadableDocument(Exception):
    """A document whose text cannot be had (a damaged or password-protected PDF); ingest skips it."""


def pdf_text(path: Path) -> str:
    """The text layer of each page (pypdf), pages apart as paragraphs; scanned pages have none."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableDocument(f"{path}: the PDF is password-protected")
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError) as error:
        raise UnreadableDocument(f"{path}: not a readable PDF ({error})") from error
    text = "\n\n".join(re.sub(r"[ \t]+\n", "\n", page).strip() for page in pages)
    return text.strip()


def read_document(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        return pdf_text(path)
    raw = path.read_text(encoding="utf-8", errors="replace")
    return html_text(raw) if suffix in (".html", ".htm") else raw.replace("\r\n", "\n")


def document_id(path: Path) -> str:
    """The path relative to the working directory when under it, so the same file keeps its ID."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def find_documents(paths: Sequence[str]) -> Iterator[Path]:
    for name in paths:
        path = Path(name)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"{name}: no such file or directory")


def tokenizer_offsets(embedder: Embedder) -> Callable[[str], list[int]]:
    """Token end offsets in the embedding model's own tokens when it has a tokenizer, else words."""
    tokenizer = getattr(embedder, "tokenizer", None)
    if tokenizer is None:
        return lambda text: [match.end() for match in _WORDISH.finditer(text)]

    def offsets(text: str) -> list[int]:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [end for _, end in encoded["offset_mapping"]]

    return offsets


@dataclass
class IngestReport:
    documents: int = 0
    chunks: int = 0
    replaced: int = 0  # chunks of earlier versions removed first
    skipped: list[str] = field(default_factory=list)  # why each unreadable document was left out


async def ingest(
    paths: Sequence[str], *, tenant: str, collection: str, embedder: Embedder, store: VectorStore,
    chunk_tokens: int, chunk_overlap: int, progress: bool = True,
) -> IngestReport:
    await store.ensure_collection(collection, tenant)
    offsets = tokenizer_offsets(embedder)
    report = IngestReport()
    documents = list(find_documents(paths))
    for path in tqdm(documents, desc="ingest", unit="doc", disable=not progress):
        try:
            text = read_document(path)
        except UnreadableDocument as error:
            report.skipped.append(str(error))
            continue
        doc_id = document_id(path)
        spans = chunk_spans(text, offsets(text), chunk_tokens, chunk_overlap)
        report.replaced += await store.delete_document(collection, tenant, doc_id)
        for first in range(0, len(spans), EMBED_BATCH):
            batch = spans[first:first + EMBED_BATCH]
            vectors = await embedder.embed([text[start:end] for start, end in batch])
            await store.upsert(collection, tenant, [
                StoredChunk(chunk_id(tenant, doc_id, first + i), vector, tenant, doc_id, first + i,
                            text[start:end], path.name, start, end)
                for i, ((start, end), vector) in enumerate(zip(batch, vectors, strict=True))
            ])
        report.documents += 1
        report.chunks += len(spans)
    await store.bump_version(collection, tenant)
    return report


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("ingest", help="add .txt .md .html .pdf documents to a tenant's retrieval collection")
    parser.add_argument("paths", nargs="*", help="files or folders (searched for .txt, .md, .html, .pdf)")
    parser.add_argument("--tenant", required=True, help="the tenant whose collection receives the chunks")
    parser.add_argument("--collection", help="default: tenants.<tenant>.retrieval.collection, else 'prefixgate'")
    parser.add_argument("--delete", metavar="DOC", action="append", default=[], help="remove a document instead")
    parser.add_argument("--config", help="YAML config file (default: $PREFIXGATE_CONFIG, else environment only)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args: Any) -> int:
    import asyncio
    import sys

    from proxy.config.load import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"prefixgate: {error}", file=sys.stderr)
        return 2
    if not args.paths and not args.delete:
        print("prefixgate ingest: give PATH... to add or --delete DOC to remove", file=sys.stderr)
        return 2
    missing = [path for path in args.paths if not Path(path).exists()]
    if missing:  # before the model loads: a typo should not cost ten seconds
        print(f"prefixgate ingest: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    own = config.tenants.get(args.tenant)
    collection = args.collection or (own.retrieval.collection if own and own.retrieval else "prefixgate")
    if args.tenant not in config.reachable_tenants:
        print(f"prefixgate ingest: warning: no API key in this config names tenant '{args.tenant}', so no request "
              "will get these documents until one does (without keys every request is tenant "
              f"'{OPEN_TENANT}')", file=sys.stderr)
    try:
        return asyncio.run(_ingest_command(args, config, collection))
    except StoreInUse as error:
        print(f"prefixgate ingest: {error}", file=sys.stderr)
        return 1


async def _ingest_command(args: Any, config: Any, collection: str) -> int:
    import sys

    from proxy.retrieval.retriever import Retriever, configured_store

    # Open the store before the embedding model loads (seconds): a folder that a running gateway holds
    # then fails at once, with the one line run() prints and no model-loading chatter before it.
    opened = configured_store(config)(0)  # its dimensions are the embedder's, known once it has loaded
    retriever = await Retriever.start(config, open_store=lambda dimensions: VectorStore(
        opened.client, dimensions, per_tenant_collections=opened.per_tenant_collections))
    try:
        for doc in args.delete:
            removed = await retriever.store.delete_document(collection, args.tenant, document_id(Path(doc)))
            await retriever.store.bump_version(collection, args.tenant)
            print(f"{doc}: removed {removed} chunks")
        if args.paths:
            settings = config.retrieval
            report = await ingest(args.paths, tenant=args.tenant, collection=collection, embedder=retriever.embedder,
                                  store=retriever.store, chunk_tokens=settings.chunk_tokens,
                                  chunk_overlap=settings.chunk_overlap, progress=not args.quiet)
            print(f"ingested {report.documents} documents as {report.chunks} chunks into '{collection}' "
                  f"for tenant '{args.tenant}' (replaced {report.replaced} earlier chunks)")
            for reason in report.skipped:
                print(f"prefixgate ingest: skipped {reason}", file=sys.stderr)
            if report.skipped:
                return 1
    finally:
        await retriever.aclose()
    return 0
