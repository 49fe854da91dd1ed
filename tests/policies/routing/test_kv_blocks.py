"""The held-blocks index: events in, how much of a prompt each replica holds out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies.routing.kv_blocks import HeldBlocks, KeyChain, block_keys, extend_keys

BLOCK = 4
PROMPT = list(range(100, 118))  # 4 full blocks and 2 tokens over


def store(index: HeldBlocks, replica: int, tokens: list[int], *, first: int = 0, parent: object = None,
          salt: str | None = None, tag: str = "e") -> list[str]:
    """Report ``tokens``' full blocks from block ``first`` on as the engine of ``replica`` would: its own
    hash names for them (any values), the salt in block 0's extra keys."""
    count = len(tokens) // BLOCK
    hashes = [f"{tag}{replica}-{first + n}" for n in range(count)]
    extra = [[salt] if salt and first + n == 0 else None for n in range(count)]
    assert index.stored(replica, parent, hashes, tokens[:count * BLOCK], BLOCK, extra)
    return hashes


def test_a_replica_holds_the_blocks_it_stored_and_only_up_to_the_first_gap() -> None:
    index = HeldBlocks(3)
    keys = block_keys(PROMPT, BLOCK, None)
    assert len(keys) == 4
    store(index, 0, PROMPT)
    hashes = store(index, 1, PROMPT[:8])  # the first two blocks
    store(index, 1, PROMPT[8:16], first=2, parent=hashes[-1])  # two more, chained after them
    store(index, 2, PROMPT[4:16], first=1)  # the same tokens, but not after the same start: not this prefix
    assert index.held(keys) == [4, 4, 0]
    index.removed(1, [hashes[1]])  # evicting block 1 makes blocks 2 and 3 useless to this prompt
    assert index.held(keys) == [4, 1, 0]
    index.cleared(0)
    assert index.held(keys) == [0, 1, 0]


def test_the_salt_keeps_tenants_apart() -> None:
    index = HeldBlocks(2)
    store(index, 0, PROMPT, salt="tenant-a")
    store(index, 1, PROMPT)
    assert index.held(block_keys(PROMPT, BLOCK, "tenant-a")) == [4, 0]
    assert index.held(block_keys(PROMPT, BLOCK, "tenant-b")) == [0, 0]
    assert index.held(block_keys(PROMPT, BLOCK, None)) == [0, 4]


def test_a_block_whose_parent_was_never_seen_is_not_indexed() -> None:
    index = HeldBlocks(1)
    assert not index.stored(0, "lost-parent", ["x"], PROMPT[4:8], BLOCK)
    assert index.size(0) == 0 and index.held(block_keys(PROMPT, BLOCK, None)) == [0]


def test_a_replica_past_its_bound_is_forgotten_rather_than_grown() -> None:
    index = HeldBlocks(2, max_blocks=6)
    store(index, 0, PROMPT)
    store(index, 1, PROMPT)
    store(index, 0, [7] * 12, tag="more")  # 7 blocks on replica 0: its removals must have gone missing
    assert index.size(0) == 0 and index.held(block_keys(PROMPT, BLOCK, None)) == [0, 4]


def test_removing_what_one_replica_holds_leaves_the_others() -> None:
    index = HeldBlocks(2)
    first = store(index, 0, PROMPT)
    store(index, 1, PROMPT)
    index.removed(0, first)
    index.removed(0, ["never-stored"])
    assert index.held(block_keys(PROMPT, BLOCK, None)) == [0, 4]
    index.removed(1, [f"e1-{n}" for n in range(4)])
    assert index.holders == {}  # nothing left behind


@given(st.lists(st.integers(0, 50), max_size=40), st.lists(st.integers(0, 40), max_size=5),
       st.sampled_from([None, "salt"]))
def test_keys_computed_piece_by_piece_are_the_whole_prompts(tokens: list[int], cuts: list[int],
                                                            salt: str | None) -> None:
    chain, start = KeyChain(), 0
    for cut in sorted(cuts):
        chain = extend_keys(chain, tokens[start:max(start, cut)], BLOCK, salt)
        start = max(start, cut)
    chain = extend_keys(chain, tokens[start:], BLOCK, salt)
    assert chain.keys == block_keys(tokens, BLOCK, salt)
    assert len(chain.tail) == len(tokens) % BLOCK
