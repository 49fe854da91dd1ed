"""Which paragraphs of a tenant's documents are boilerplate: the header, footer, navigation or
disclaimer that many pages repeat word for word.

Repeated paragraphs hurt retrieval twice: in a chunk's vector they outweigh the few sentences that
make the page different (a short question then lands on whichever page's chunk is mostly footer),
and in keyword search their words match every page alike. Kept out of the text that is embedded and
indexed, they leave each chunk with what only its page says.

A paragraph is a run of text between blank lines, compared after collapsing whitespace and case, so
a footer wrapped differently on one page still matches. It counts as boilerplate when it appears in
at least ``BoilerplateRule.min_documents`` documents and in at least ``min_share`` of all of them.
Pure: texts and counts in, keys and texts out.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_PARAGRAPH = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True, slots=True)
class BoilerplateRule:
    min_documents: int = 3  # never boilerplate in fewer documents than this, however small the collection
    min_share: float = 0.3  # and in at least this share of the collection's documents


DEFAULT_RULE = BoilerplateRule()


def paragraphs(text: str) -> list[str]:
    """The non-blank paragraphs of ``text``, as written."""
    return [part.strip() for part in _PARAGRAPH.split(text) if part.strip()]


def paragraph_key(paragraph: str) -> str:
    """A short stable key for a paragraph's normalized text (whitespace collapsed, case folded)."""
    normalized = " ".join(paragraph.split()).casefold()
    return hashlib.blake2b(normalized.encode(), digest_size=12).hexdigest()


def keyed_paragraphs(text: str) -> dict[str, str]:
    """Each paragraph of ``text`` under its key, in order (the first of repeats)."""
    keyed: dict[str, str] = {}
    for part in paragraphs(text):
        keyed.setdefault(paragraph_key(part), part)
    return keyed


def document_keys(text: str) -> frozenset[str]:
    """The keys of the paragraphs a document holds (each once, however often it repeats it)."""
    return frozenset(paragraph_key(part) for part in paragraphs(text))


def count_documents(documents: Iterable[frozenset[str]]) -> Counter[str]:
    """How many documents hold each paragraph key."""
    counts: Counter[str] = Counter()
    for keys in documents:
        counts.update(keys)
    return counts


def repeated_keys(counts: Mapping[str, int], documents: int, rule: BoilerplateRule) -> frozenset[str]:
    """The paragraph keys that are boilerplate in a collection of ``documents`` documents."""
    needed = max(rule.min_documents, rule.min_share * documents)
    return frozenset(key for key, count in counts.items() if count >= needed)


def without_boilerplate(text: str, boilerplate: frozenset[str]) -> str:
    """``text`` with its boilerplate paragraphs left out and the others joined by blank lines; the text
    itself when nothing in it is boilerplate."""
    if not boilerplate:
        return text
    parts = paragraphs(text)
    kept = [part for part in parts if paragraph_key(part) not in boilerplate]
    return text if len(kept) == len(parts) else "\n\n".join(kept)
