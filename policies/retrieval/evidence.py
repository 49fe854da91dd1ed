"""Which retrieved chunks go into the prompt, and in what exact form.

Retrieval is where RAG prompts grow to thousands of tokens, and every byte of the evidence block
sits in front of the question, so two rules drive this module:
  * smaller: near-duplicate chunks (the same paragraph in two documents, re-ingested copies, a copy
    under another title: chunks are compared without their headings) are dropped, adjacent chunks
    of one document are merged with their overlap removed, and the total is capped by a token budget;
  * stabler: the kept passages are ordered by document and position, never by score, and rendered
    with one fixed template, so two requests that retrieve overlapping sets lay them out the same
    way and share a longer cached prefix.
Pure: chunks and a token counter in, passages and text out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from policies.prompt.message_text import text_of, text_part

TokenCounter = Callable[[str], int]

HEADER = "[Retrieved context]"
FOOTER = "[End of retrieved context]"
_WORD = re.compile(r"\w+")
_SHINGLE = 3  # words per shingle: long enough that shared stock phrases do not make chunks look alike
_ATX_HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]|$)")  # "# Title"
_UNDERLINE = re.compile(r"[ \t]*(?:=+|-+)[ \t]*$")  # the line under a setext heading ("Title" over "=====")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_TITLE_WORDS = 16  # a leading paragraph of one line this short that ends no sentence is a title
_PROSE_ENDS = (".", ",", ";", ":")  # a line that ends so is prose; a title may end in "?" or "!"
_MIN_OVERLAP = 24  # characters two neighbours must share before the shared run is written once
_MAX_OVERLAP_CHARS = 4_000  # how far back into the left chunk the overlap search looks


@dataclass(frozen=True, slots=True)
class Chunk:
    """One search hit: a piece of a document, as stored at ingestion."""

    doc_id: str
    index: int  # position of the chunk in its document
    text: str
    score: float
    source: str = ""
    start: int | None = None  # character offsets in the document, when ingestion stored them
    end: int | None = None


@dataclass(frozen=True, slots=True)
class Passage:
    """One or more adjacent chunks of a document, as they will appear in the prompt."""

    doc_id: str
    first: int
    last: int
    text: str
    score: float  # the best score among its chunks
    source: str
    tokens: int
    end: int | None = None  # character offset of its end in the document, when known


@dataclass(frozen=True, slots=True)
class EvidencePolicy:
    top_n: int = 5
    budget_tokens: int = 1_500
    duplicate_similarity: float = 0.85  # Jaccard similarity of word shingles at or above which a chunk is a copy


def _by_score(chunk: Chunk | Passage) -> tuple[float, str, int, str]:
    """Best first; ties broken by document, position and text, so input order never matters."""
    first = chunk.index if isinstance(chunk, Chunk) else chunk.first
    return (-chunk.score, chunk.doc_id, first, chunk.text)


def _is_title(paragraph: str) -> bool:
    return ("\n" not in paragraph and not paragraph.endswith(_PROSE_ENDS)
            and len(_WORD.findall(paragraph)) <= _TITLE_WORDS)


def without_headings(text: str) -> str:
    """What a passage says: ``text`` without its headings, or ``text`` itself when that is all it holds.

    A document's first chunk starts with its title, and a chunk is short once boilerplate is left out,
    so a copy of an article under another title would differ from it by more than the title's share
    of words. Headings go wherever a mark says so (a Markdown ``#`` line; a line underlined with ``=``
    or ``-``, and its underline), and leading paragraphs that read as titles (one short line that ends
    no sentence, as an HTML page's title and ``h1`` come out of the reader) go at the start.
    """
    lines = text.splitlines()
    underlined = {i - 1 for i in range(1, len(lines)) if _UNDERLINE.match(lines[i]) and lines[i - 1].strip()}
    kept = [line for i, line in enumerate(lines)
            if i not in underlined and i - 1 not in underlined and not _ATX_HEADING.match(line)]
    paragraphs = [part.strip() for part in _PARAGRAPH.split("\n".join(kept)) if part.strip()]
    while paragraphs and _is_title(paragraphs[0]):
        paragraphs.pop(0)
    body = "\n\n".join(paragraphs)
    return body if _WORD.search(body) else text


def shingles(text: str) -> frozenset[str]:
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    if len(words) < _SHINGLE:
        return frozenset([" ".join(words)]) if words else frozenset()
    return frozenset(" ".join(words[i:i + _SHINGLE]) for i in range(len(words) - _SHINGLE + 1))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 1.0 if a == b else 0.0
    return len(a & b) / len(a | b)


def drop_near_duplicates(chunks: Iterable[Chunk], threshold: float) -> list[Chunk]:
    """Keep the best-scored chunk of each group of near-copies; the rest say nothing new.

    Chunks are compared by what they say (``without_headings``): a copy under another title is still
    a copy, and two passages under one title that say different things are both kept.

    Exact Jaccard over all pairs: a search returns tens of hits, not thousands, so no MinHash.
    The same chunk (document and index) returned twice counts as a copy whatever its text.
    """
    kept: list[tuple[Chunk, frozenset[str]]] = []
    seen: set[tuple[str, int]] = set()
    for chunk in sorted(chunks, key=_by_score):
        if (chunk.doc_id, chunk.index) in seen:
            continue
        words = shingles(without_headings(chunk.text))
        if any(similarity(words, other) >= threshold for _, other in kept):
            continue
        kept.append((chunk, words))
        seen.add((chunk.doc_id, chunk.index))
    return [chunk for chunk, _ in kept]


def join_overlapping(left: str, right: str) -> str:
    """``left`` then ``right``, written once where the end of one repeats the start of the other.

    For chunks stored without offsets. Chunks are cut with overlap at ingestion, so neighbours
    share a run of text: taken as the longest suffix of ``left`` that is also a prefix of ``right``
    (text that repeats itself can make that longer than the real overlap; offsets avoid the guess).
    Runs shorter than ``_MIN_OVERLAP`` characters are coincidence (a word ending as the next
    begins), not overlap.
    """
    anchor = right[:_MIN_OVERLAP]
    if len(anchor) == _MIN_OVERLAP:
        position = left.find(anchor, max(0, len(left) - _MAX_OVERLAP_CHARS))
        while position != -1:  # leftmost first: the longest overlap wins
            if right.startswith(left[position:]):
                return left + right[len(left) - position:]
            position = left.find(anchor, position + 1)
    separator = "" if left.endswith((" ", "\n")) or right.startswith((" ", "\n")) else "\n"
    return left + separator + right


def merge_adjacent(chunks: Iterable[Chunk], count_tokens: TokenCounter) -> list[Passage]:
    """Runs of consecutive chunks of one document become one passage (read in document order)."""
    passages: list[Passage] = []
    for chunk in sorted(chunks, key=lambda c: (c.doc_id, c.index)):
        last = passages[-1] if passages else None
        if last is not None and last.doc_id == chunk.doc_id and last.last + 1 == chunk.index:
            if last.end is not None and chunk.start is not None and chunk.start <= last.end:
                text = last.text + chunk.text[last.end - chunk.start:]  # offsets known: exact
            else:
                text = join_overlapping(last.text, chunk.text)
            passages[-1] = Passage(last.doc_id, last.first, chunk.index, text, max(last.score, chunk.score),
                                   last.source or chunk.source, count_tokens(text), chunk.end)
        else:
            passages.append(Passage(chunk.doc_id, chunk.index, chunk.index, chunk.text, chunk.score,
                                    chunk.source, count_tokens(chunk.text), chunk.end))
    return passages


def passages_within_budget(passages: Iterable[Passage], top_n: int, budget_tokens: int) -> list[Passage]:
    """The best ``top_n`` passages whose tokens fit the budget together, taken greedily by score.

    A passage that does not fit is skipped rather than cut: a half passage can lose the sentence
    that made it relevant, and a smaller one further down may still fit.
    """
    kept: list[Passage] = []
    spent = 0
    for passage in sorted(passages, key=_by_score):
        if len(kept) == top_n:
            break
        if spent + passage.tokens <= budget_tokens:
            kept.append(passage)
            spent += passage.tokens
    return kept


def select_evidence(chunks: Sequence[Chunk], policy: EvidencePolicy, count_tokens: TokenCounter) -> list[Passage]:
    """Dedupe, merge neighbours, keep the top N under the budget, then order by document and position."""
    distinct = drop_near_duplicates(chunks, policy.duplicate_similarity)
    passages = merge_adjacent(distinct, count_tokens)
    kept = passages_within_budget(passages, policy.top_n, policy.budget_tokens)
    return sorted(kept, key=lambda p: (p.doc_id, p.first))


def render_evidence(passages: Sequence[Passage]) -> str:
    """One fixed layout: numbered citation labels, fixed field order and separators; '' when empty."""
    if not passages:
        return ""
    blocks = [HEADER]
    for number, passage in enumerate(passages, 1):
        where = f"{passage.first}" if passage.first == passage.last else f"{passage.first}-{passage.last}"
        source = passage.source or passage.doc_id
        blocks.append(f"[{number}] {source} (chunk {where})\n{passage.text.strip()}")
    blocks.append(FOOTER)
    return "\n\n".join(blocks)


def last_user_index(messages: Sequence[dict]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def question_of(body: dict) -> str:
    """The text retrieval searches for: the final user message ('' when there is none)."""
    index = last_user_index(body["messages"])
    return "" if index is None else text_of(body["messages"][index].get("content")).strip()


def with_evidence(body: dict, evidence: str) -> dict:
    """A copy of ``body`` with the evidence block at the start of the final user message.

    Everything before that message (system preamble, tools, history) is untouched and stays a
    cacheable prefix; the question follows its evidence. The input is never mutated.
    """
    index = last_user_index(body["messages"])
    if not evidence or index is None:
        return body
    message = body["messages"][index]
    content = message.get("content")
    if isinstance(content, list):
        new_content: object = [text_part(content, evidence + "\n\n"), *content]
    else:
        new_content = evidence + "\n\n" + (content or "")
    messages = list(body["messages"])
    messages[index] = {**message, "content": new_content}
    return {**body, "messages": messages}
