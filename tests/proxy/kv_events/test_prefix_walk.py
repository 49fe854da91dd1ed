"""The chunked walk finds what the whole prompt's tokens would, and tokenizes only what can matter.

With the tiny model's own tokenizer and chat template (built here, as the engine's are)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from policies.routing.kv_blocks import HeldBlocks, block_keys
from proxy.engine.tiny_model import ensure_tiny_model
from proxy.kv_events.prefix_walk import PrefixWalk, chunks
from proxy.kv_events.prompt_tokens import PromptTokens

BLOCK = 16
WORDS = "refund order invoice café 東京 2026-11-25 (see §4) x=1; print(status)\n\tdone".split(" ")


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> PromptTokens:
    folder = ensure_tiny_model(tmp_path_factory.mktemp("tiny"))
    return PromptTokens(str(folder), max_chars=3000)


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def store_prompt(index: HeldBlocks, replica: int, ids: list[int], salt: str | None) -> None:
    count = len(ids) // BLOCK
    extra = [[salt] if salt and n == 0 else None for n in range(count)]
    index.stored(replica, None, [f"{replica}-{id(ids)}-{n}" for n in range(count)], ids[:count * BLOCK], BLOCK, extra)


def test_chunks_cover_the_text_cut_before_spaces() -> None:
    sample = "one two three four five six seven"
    pieces = list(chunks(sample, 8, 1000))
    assert "".join(sample[a:b] for a, b in pieces) == sample
    assert all(sample[b] == " " for _, b in pieces[:-1])
    assert list(chunks(sample, 8, 12))[-1][1] == 7  # past the limit: cut before the space before it


def test_the_tiny_tokenizer_splits_cleanly_at_spaces(tokens: PromptTokens) -> None:
    assert tokens.splits_cleanly()


@pytest.mark.parametrize("salt", [None, "tenant-salt"])
def test_the_walk_agrees_with_the_whole_prompts_tokens(tokens: PromptTokens, salt: str | None) -> None:
    rng = random.Random(3)
    walk = PrefixWalk(tokens, chunk_chars=100)
    for _ in range(20):
        system = text(rng, rng.randint(20, 700))  # some past max_chars
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": text(rng, 9)}]}
        whole = tokens.of_body(body)
        assert whole is not None
        index = HeldBlocks(3)
        held_prefix = whole[:rng.randint(0, len(whole))]  # replica 1 holds a prefix, replica 2 all of it
        store_prompt(index, 1, held_prefix, salt)
        store_prompt(index, 2, whole, salt)
        rendered = tokens.rendered(body)
        assert rendered is not None
        expected = index.held(block_keys(whole, BLOCK, salt))
        assert walk.held(index, rendered[0], rendered[1], BLOCK, salt) == expected
        assert expected[2] == len(whole) // BLOCK and expected[0] == 0


def test_a_held_system_prompt_costs_only_the_chunks_past_it(tokens: PromptTokens) -> None:
    rng = random.Random(5)
    walk = PrefixWalk(tokens, chunk_chars=100)
    system = text(rng, 300)
    index = HeldBlocks(2)
    store_prompt(index, 0, tokens.of_chat([{"role": "system", "content": system}]), None)

    def ask() -> list[int]:
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": text(rng, 12)}]}
        rendered = tokens.rendered(body)
        assert rendered is not None
        return walk.held(index, rendered[0], rendered[1], BLOCK, None)

    first = ask()
    assert first[0] > 0 and first[1] == 0
    before = walk.tokenized_chars
    assert ask()[0] == first[0]  # a new question under the same system prompt
    assert walk.tokenized_chars - before <= 2 * 100  # the chunk or two past the held prefix, not the prompt
    nobody = HeldBlocks(2)
    before = walk.tokenized_chars
    body = {"messages": [{"role": "system", "content": text(rng, 300)}, {"role": "user", "content": "hi"}]}
    rendered = tokens.rendered(body)
    assert rendered is not None
    assert walk.held(nobody, rendered[0], rendered[1], BLOCK, None) == [0, 0]
    assert walk.tokenized_chars - before <= 100  # held nowhere: one chunk read, then the walk stops


def test_the_prompt_is_read_no_further_than_max_chars(tokens: PromptTokens, tmp_path: Path) -> None:
    body = {"messages": [{"role": "user", "content": text(random.Random(9), 2000)}]}
    whole = tokens.of_body(body)
    assert whole is not None and len(whole) < len(tokens.encode(tokens.rendered(body)[0], special=False))  # type: ignore[index]
