"""Documents on disk as text: which files ingest reads, their text, and the ID each keeps.

Text, Markdown, HTML (visible text, block elements as paragraph breaks) and PDF (the text layer of
each page); an unreadable document is reported and skipped, never fatal to the run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")


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
