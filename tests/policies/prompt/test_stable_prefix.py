"""Shared-prefix length between consecutive prompts, the measure behind prefixgate_stable_prefix_*."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from policies.prompt.stable_prefix import chat_pieces, common_prefix, shared_prefix, total_length
from tests.support.chat_body import chat_body as chat


def test_identical_prompts_share_everything_and_a_change_stops_the_count() -> None:
    a = chat_pieces(chat("Be brief.", "Hi"))
    assert shared_prefix(a, a) == total_length(a)
    b = chat_pieces(chat("Be bold.", "Hi"))
    assert shared_prefix(a, b) == len("<system>") + len("Be b")
    # a new tool list changes the head, so nothing after it counts
    assert shared_prefix(a, chat_pieces(chat("Be brief.", "Hi", tools=[{"type": "function"}]))) == 0


def test_content_parts_count_as_their_text() -> None:
    parts = chat_pieces({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                                  {"type": "image_url", "image_url": {}}]}]})
    assert parts == ("<user>", "Hi")


@given(st.text(max_size=300), st.text(max_size=300))
def test_binary_search_matches_the_plain_definition(a: str, b: str) -> None:
    assert common_prefix(a, b) == len(os.path.commonprefix([a, b]))  # noqa: RUF071 (characters wanted)
    assert common_prefix(a, a + b) == len(a)
