"""Evidence selection: smaller (dedupe, merge, budget) and stabler (order and layout) prompts."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.retrieval.evidence import (
    FOOTER,
    HEADER,
    Chunk,
    EvidencePolicy,
    Passage,
    drop_near_duplicates,
    join_overlapping,
    merge_adjacent,
    passages_within_budget,
    render_evidence,
    select_evidence,
    without_headings,
)


def words(text: str) -> int:
    return len(text.split())


PARIS = "The Eiffel Tower was finished in 1889 for the World's Fair and stands 330 metres tall in Paris."
ROME = "The Colosseum in Rome held up to fifty thousand spectators for games and public spectacles."


def test_a_near_copy_is_dropped_and_the_better_scored_copy_kept() -> None:
    copy = PARIS.replace("330 metres", "330 m").upper()  # case and one small edit
    chunks = [Chunk("b", 0, copy, 0.70), Chunk("a", 4, PARIS, 0.90), Chunk("c", 1, ROME, 0.50)]
    kept = drop_near_duplicates(chunks, 0.6)
    assert [(c.doc_id, c.index) for c in kept] == [("a", 4), ("c", 1)]


def test_chunks_on_the_same_topic_but_different_words_are_both_kept() -> None:
    other = "Paris hosted the 1889 Exposition Universelle; Gustave Eiffel's company built its famous iron tower."
    assert len(drop_near_duplicates([Chunk("a", 0, PARIS, 0.9), Chunk("b", 0, other, 0.8)], 0.85)) == 2


# An article's first chunk once boilerplate is left out: its title, then a few sentences.
RESET = ("Open the sign-in page and choose Forgot password. Enter the email address of your account and we "
         "send a link that stays valid for one hour. The new password needs at least twelve characters and "
         "cannot repeat any of your last five.")


@pytest.mark.parametrize(("title", "other_title"), [
    ("# How do I reset my password?\n\n", "# Resetting a forgotten password in the web app\n\n"),
    ("Reset your password\n===================\n", "Password help for every workspace\n----\n"),
    ("Reset your password | Quillstack Help\n\nReset your password\n\n",  # an HTML page's title and h1
     "Forgotten password - Acme Support Portal\n\nForgotten password\n\n"),
], ids=["markdown", "setext", "html"])
def test_a_copy_under_another_title_is_dropped(title: str, other_title: str) -> None:
    chunks = [Chunk("copy", 0, other_title + RESET, 0.7), Chunk("article", 0, title + RESET, 0.9)]
    assert [c.doc_id for c in drop_near_duplicates(chunks, 0.85)] == ["article"]


def test_passages_under_one_title_that_say_different_things_are_both_kept() -> None:
    chunks = [Chunk("a", 0, f"# Paris\n\n{PARIS}", 0.9), Chunk("b", 3, f"# Paris\n\n{ROME}", 0.8)]
    assert len(drop_near_duplicates(chunks, 0.85)) == 2


def test_chunks_that_hold_only_headings_are_compared_whole() -> None:
    chunks = [Chunk("a", 0, "# Billing and plans", 0.9), Chunk("b", 0, "# Security at Quillstack", 0.8)]
    assert len(drop_near_duplicates(chunks, 0.85)) == 2
    assert without_headings("# Billing and plans") == "# Billing and plans"


def test_headings_are_left_out_and_what_the_passage_says_stays() -> None:
    text = "Setup\n\n## Install\nRun the installer.\nThen sign in:\n\nEmail and password\n\n- one\n- two"
    assert without_headings(text) == "Run the installer.\nThen sign in:\n\nEmail and password\n\n- one\n- two"


def test_the_same_chunk_returned_twice_counts_once() -> None:
    kept = drop_near_duplicates([Chunk("a", 0, PARIS, 0.9), Chunk("a", 0, PARIS, 0.9)], 0.85)
    assert len(kept) == 1


def test_neighbours_merge_with_their_overlap_written_once() -> None:
    text = " ".join(f"word{i}" for i in range(60))
    left, right = text[:300], text[240:]  # 60 characters of overlap, as ingestion cuts them
    assert join_overlapping(left, right) == text
    passages = merge_adjacent([Chunk("d", 3, right, 0.4), Chunk("d", 2, left, 0.8)], words)
    assert passages == [Passage("d", 2, 3, text, 0.8, "", 60)]


def test_a_short_coincidental_overlap_is_not_removed() -> None:
    assert join_overlapping("It ends with the", "these words begin") == "It ends with the\nthese words begin"


def test_only_consecutive_chunks_of_one_document_merge() -> None:
    chunks = [Chunk("d", 1, "one", 0.5), Chunk("d", 3, "three", 0.6), Chunk("e", 2, "two", 0.7)]
    passages = merge_adjacent(chunks, words)
    assert [(p.doc_id, p.first, p.last) for p in passages] == [("d", 1, 1), ("d", 3, 3), ("e", 2, 2)]


def test_budget_skips_a_passage_that_does_not_fit_and_takes_a_smaller_one() -> None:
    big = Passage("a", 0, 0, "x " * 900, 0.9, "", 900)
    huge = Passage("b", 0, 0, "y " * 800, 0.8, "", 800)
    small = Passage("c", 0, 0, "z " * 300, 0.7, "", 300)
    kept = passages_within_budget([small, huge, big], top_n=5, budget_tokens=1_500)
    assert [p.doc_id for p in kept] == ["a", "c"]


def test_top_n_counts_passages_by_score() -> None:
    passages = [Passage(str(i), 0, 0, "t", i / 10, "", 1) for i in range(8)]
    assert [p.doc_id for p in passages_within_budget(passages, top_n=3, budget_tokens=100)] == ["7", "6", "5"]


def test_kept_passages_are_ordered_by_document_and_position_not_score() -> None:
    chunks = [Chunk("guide", 7, "seven " * 5, 0.95), Chunk("faq", 2, "two " * 5, 0.60),
              Chunk("guide", 1, "one " * 5, 0.80)]
    kept = select_evidence(chunks, EvidencePolicy(), words)
    assert [(p.doc_id, p.first) for p in kept] == [("faq", 2), ("guide", 1), ("guide", 7)]


def test_overlapping_retrievals_render_with_a_shared_prefix() -> None:
    """Two questions hit the same two passages with different scores, plus one of their own."""
    first = [Chunk("a", 0, PARIS, 0.9), Chunk("b", 0, ROME, 0.5), Chunk("z", 0, "Only the first asks this.", 0.7)]
    second = [Chunk("a", 0, PARIS, 0.4), Chunk("b", 0, ROME, 0.8), Chunk("y", 0, "Only the second asks this.", 0.6)]
    one, two = (render_evidence(select_evidence(hits, EvidencePolicy(), words)) for hits in (first, second))
    shared = render_evidence([p for p in select_evidence(first, EvidencePolicy(), words) if p.doc_id in "ab"])
    assert one.startswith(shared[: -len(FOOTER)]) and two.startswith(shared[: -len(FOOTER)])


def test_render_uses_one_fixed_layout_with_citation_labels() -> None:
    passages = [Passage("faq", 2, 2, " Two. ", 0.6, "faq.md", 1), Passage("guide", 1, 2, "One and two.", 0.8, "", 3)]
    assert render_evidence(passages) == (
        f"{HEADER}\n\n[1] faq.md (chunk 2)\nTwo.\n\n[2] guide (chunk 1-2)\nOne and two.\n\n{FOOTER}"
    )
    assert render_evidence([]) == ""


_texts = st.lists(st.sampled_from("alpha beta gamma delta epsilon zeta eta theta iota kappa".split()),
                  min_size=1, max_size=30).map(" ".join)
_chunks = st.lists(
    st.builds(Chunk, st.sampled_from(["a", "b", "c"]), st.integers(0, 6), _texts,
              st.floats(0, 1, allow_nan=False)),
    max_size=14,
)


@given(_chunks, st.randoms(use_true_random=False), st.integers(1, 6), st.integers(0, 120))
def test_selection_does_not_depend_on_the_order_hits_arrive_in(
    chunks: list[Chunk], rng: object, top_n: int, budget: int
) -> None:
    policy = EvidencePolicy(top_n=top_n, budget_tokens=budget)
    shuffled = list(chunks)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert render_evidence(select_evidence(chunks, policy, words)) == render_evidence(
        select_evidence(shuffled, policy, words)
    )


@given(_chunks, st.integers(1, 6), st.integers(0, 120))
def test_selection_respects_top_n_budget_and_stable_order(chunks: list[Chunk], top_n: int, budget: int) -> None:
    kept = select_evidence(chunks, EvidencePolicy(top_n=top_n, budget_tokens=budget), words)
    assert len(kept) <= top_n
    assert sum(p.tokens for p in kept) <= budget
    assert [(p.doc_id, p.first) for p in kept] == sorted((p.doc_id, p.first) for p in kept)
    for earlier, later in pairwise(kept):  # passages never overlap
        assert earlier.doc_id != later.doc_id or earlier.last < later.first


@given(st.text(min_size=0, max_size=200), st.text(min_size=0, max_size=200), st.text(min_size=24, max_size=80))
def test_joining_never_loses_text(left: str, right: str, shared: str) -> None:
    joined = join_overlapping(left + shared, shared + right)
    assert joined.startswith(left + shared) and joined.endswith(shared + right)
    assert len(joined) <= len(left) + len(shared) * 2 + len(right) + 1
