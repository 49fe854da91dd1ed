"""Where documents are cut into chunks at ingestion, and what each chunk is called.

Chunks are bounded in tokens (what the evidence budget and the engine count), overlap their
neighbour by a few tokens so a sentence cut at a boundary is still whole in one of them, and end
at a paragraph or sentence break when one lies near the limit, so a chunk reads as prose. Cuts are
character spans of the original text, so neighbours overlap by exactly the same characters and
``policies.retrieval.evidence.join_overlapping`` can write the overlap once when it merges them back.

IDs are stable: the same tenant, document and chunk index always give the same ID, so ingesting
a document again overwrites its chunks instead of adding copies.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

# A fixed namespace: IDs must not change between releases, or re-ingestion would duplicate.
_NAMESPACE = uuid.UUID("6f0c1d52-3b8e-5d7a-9c41-2a5e8f7b9d10")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")


def chunk_id(tenant: str, doc_id: str, index: int) -> str:
    """A UUID (the ID form Qdrant accepts) derived from tenant, document and position."""
    return str(uuid.uuid5(_NAMESPACE, f"{tenant}\x00{doc_id}\x00{index}"))


def _break_strength(text: str, position: int) -> int:
    """How good a place to cut ``position`` is: 2 at a paragraph break, 1 after a sentence, else 0."""
    if _PARAGRAPH.search(text, max(0, position - 3), position + 3):
        return 2
    head = text[max(0, position - 4):position]
    ended = head.rstrip()
    if ended.endswith(("\u3002", "\uff01", "\uff1f")):  # CJK full stop, exclamation and question marks
        return 1
    followed_by_space = len(ended) < len(head) or position >= len(text) or text[position].isspace()
    if ended.rstrip("\"')]").endswith((".", "!", "?")) and followed_by_space:
        return 1
    return 0


def chunk_spans(text: str, token_ends: Sequence[int], max_tokens: int, overlap_tokens: int) -> list[tuple[int, int]]:
    """Character spans of the chunks of ``text``.

    ``token_ends[i]`` is the character offset where token ``i`` ends (a tokenizer's offsets). A chunk
    holds at most ``max_tokens`` tokens; it ends at the strongest break within the last quarter of
    that window (else at the limit), and the next starts ``overlap_tokens`` tokens before that end.
    """
    if max_tokens < 1 or not 0 <= overlap_tokens < max_tokens:
        raise ValueError("need max_tokens >= 1 and 0 <= overlap_tokens < max_tokens")
    count = len(token_ends)
    if not text.strip() or count == 0:
        return []
    spans: list[tuple[int, int]] = []
    first = 0  # index of the chunk's first token
    while True:
        limit = min(first + max_tokens, count)
        end = limit
        if limit < count:
            best = 0
            lowest = max(first + max_tokens * 3 // 4, first + overlap_tokens + 1)  # the next chunk must advance
            for candidate in range(limit, lowest - 1, -1):
                strength = _break_strength(text, token_ends[candidate - 1])
                if strength > best:
                    best, end = strength, candidate
                    if strength == 2:
                        break
        start_char = token_ends[first - 1] if first else 0
        end_char = token_ends[end - 1] if end < count else len(text)
        spans.append((start_char, end_char))
        if end >= count:
            return spans
        first = max(end - overlap_tokens, first + 1)


def chunk_text(text: str, token_ends: Sequence[int], max_tokens: int, overlap_tokens: int) -> list[str]:
    return [text[start:end] for start, end in chunk_spans(text, token_ends, max_tokens, overlap_tokens)]
