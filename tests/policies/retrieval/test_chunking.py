"""Ingestion cuts: token-bounded, overlapping, at natural breaks, with stable IDs."""

from __future__ import annotations

import re
import uuid
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.retrieval.chunking import chunk_id, chunk_spans, chunk_text
from policies.retrieval.evidence import Chunk, merge_adjacent


def token_ends(text: str) -> list[int]:
    """A word tokenizer's end offsets (leading whitespace belongs to the token, as in BPE)."""
    return [match.end() for match in re.finditer(r"\s*\S+", text)]


def tokens_in(text: str, span: tuple[int, int]) -> int:
    ends = token_ends(text)
    return sum(1 for end in ends if span[0] < end <= span[1])


def test_each_chunk_holds_at_most_max_tokens_and_neighbours_share_the_overlap() -> None:
    text = " ".join(f"w{i}" for i in range(100))
    spans = chunk_spans(text, token_ends(text), max_tokens=30, overlap_tokens=5)
    assert all(tokens_in(text, span) <= 30 for span in spans)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (_, end), (start, _) in pairwise(spans):
        assert tokens_in(text, (start, end)) == 5  # exactly the overlap is read twice


def test_a_cut_lands_on_a_paragraph_break_near_the_limit() -> None:
    first = " ".join(["alpha"] * 26) + "."
    second = " ".join(["beta"] * 20)
    text = first + "\n\n" + second
    chunks = chunk_text(text, token_ends(text), max_tokens=30, overlap_tokens=2)
    assert chunks[0] == first


def test_a_cut_prefers_a_sentence_end_to_the_middle_of_one() -> None:
    text = " ".join(["one"] * 24) + ". " + " ".join(["two"] * 20)
    chunks = chunk_text(text, token_ends(text), max_tokens=30, overlap_tokens=0)
    assert chunks[0].endswith("one.")


def test_short_and_empty_documents() -> None:
    assert chunk_text("Just one line.", token_ends("Just one line."), 30, 5) == ["Just one line."]
    assert chunk_spans("  \n ", token_ends("  \n "), 30, 5) == []


def test_overlap_must_be_smaller_than_the_chunk() -> None:
    with pytest.raises(ValueError, match="overlap_tokens"):
        chunk_spans("a b c", token_ends("a b c"), max_tokens=4, overlap_tokens=4)


def test_ids_are_stable_uuids_that_differ_by_tenant_document_and_position() -> None:
    assert chunk_id("acme", "guide.md", 3) == chunk_id("acme", "guide.md", 3)
    uuid.UUID(chunk_id("acme", "guide.md", 3))
    ids = {chunk_id(t, d, i) for t in ("acme", "globex") for d in ("guide.md", "faq.md") for i in range(3)}
    assert len(ids) == 12


_words = st.sampled_from(["alpha", "beta.", "gamma", "delta!", "epsilon", "zeta", "eta?", "theta"])
_document = st.lists(st.tuples(_words, st.sampled_from([" ", " ", " ", "\n", "\n\n"])), min_size=1, max_size=200).map(
    lambda parts: "".join(word + gap for word, gap in parts).strip()
)


@given(_document, st.integers(4, 40), st.data())
def test_chunks_cover_the_document_in_order_within_the_bound(text: str, max_tokens: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, max_tokens // 2))
    spans = chunk_spans(text, token_ends(text), max_tokens, overlap)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(tokens_in(text, span) <= max_tokens for span in spans)
    for (start, end), (next_start, next_end) in pairwise(spans):
        assert start < next_start <= end < next_end  # no gap, always moving forward


@given(_document, st.integers(4, 40), st.data())
def test_merging_all_chunks_of_a_document_gives_back_its_text(text: str, max_tokens: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, max_tokens - 1))
    spans = chunk_spans(text, token_ends(text), max_tokens, overlap)
    chunks = [Chunk("doc", i, text[start:end], 1.0, start=start, end=end) for i, (start, end) in enumerate(spans)]
    passages = merge_adjacent(reversed(chunks), len)
    assert [passage.text for passage in passages] == [text]
