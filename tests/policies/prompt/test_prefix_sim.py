"""The offline prefix-cache estimate follows vLLM's block rule."""

from __future__ import annotations

from policies.prompt.prefix_sim import CacheSimulation, PrefixIndex, render_chat, top_counts


def test_only_leading_full_blocks_of_an_earlier_prompt_hit() -> None:
    cache = CacheSimulation(block_size=4)
    assert cache.add(list(range(10))) == 0  # cold
    assert cache.add(list(range(10))) == 8  # two full blocks; the last two tokens are a partial block
    assert cache.add([*range(8), 99, 98]) == 8
    assert cache.add([99, *range(1, 12)]) == 0  # the chain breaks at block one: nothing after it counts
    assert cache.add(list(range(8))) == 4  # fully cached, but the last token is always computed
    assert (cache.prompt_tokens, cache.hit_tokens) == (10 + 10 + 10 + 12 + 8, 20)
    assert round(cache.hit_rate, 3) == round(20 / 50, 3)


def test_blocks_are_chained_not_matched_anywhere() -> None:
    cache = CacheSimulation(block_size=2)
    cache.add([1, 2, 3, 4, 5])
    assert cache.add([9, 9, 3, 4, 5]) == 0  # block [3, 4] is known, but after a different first block


def test_longest_shared_prefix_against_all_earlier_prompts() -> None:
    index = PrefixIndex()
    for text in ("system: be brief\nuser: a", "system: be bold\nuser: b", "tools\nsystem: x"):
        index.add(text)
    assert index.longest_shared("system: be brief\nuser: c") == len("system: be brief\nuser: ")
    assert index.longest_shared("zzz") == 0
    assert len(index) == 3


def test_render_puts_tools_first_and_finds_the_last_user_turn() -> None:
    body = {"tools": [{"type": "function", "function": {"name": "f"}}], "messages": [
        {"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A"}, {"role": "user", "content": [{"type": "text", "text": "U2"}]}]}
    text, last_user = render_chat(body)
    assert text.startswith("<|tools|>\n{") and text.endswith("<|user|>\nU2\n")
    assert text[last_user:] == "<|user|>\nU2\n"


def test_top_counts_ranks_kinds_and_keeps_a_first_example() -> None:
    items = [("clock", "Current time: 1"), ("uuid", "u1"), ("clock", "Current time: 2")]
    assert top_counts(items) == [("clock", 2, "Current time: 1"), ("uuid", 1, "u1")]
