"""An engine's event feed: batches applied in order, a restarted engine forgotten, lost batches asked again
from its replay socket (a real ZeroMQ ROUTER here, answering as vLLM's does) or, when they cannot be had,
the replica forgotten until its next events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import zmq
import zmq.asyncio

from policies.routing.kv_blocks import HeldBlocks, block_keys
from proxy.kv_events.messages import REPLAY_END, BlockRemoved, BlockStored, KVEventBatch
from proxy.kv_events.subscriber import EventFeed

BLOCK = 4
PROMPT = list(range(40, 56))  # 4 blocks
KEYS = block_keys(PROMPT, BLOCK, None)
ENCODER = msgspec.msgpack.Encoder()


def stored(first: int, count: int) -> bytes:
    """A batch storing blocks ``first`` .. ``first + count - 1`` of PROMPT, hashes named h0, h1..."""
    event = BlockStored(block_hashes=[f"h{n}" for n in range(first, first + count)],
                        parent_block_hash=f"h{first - 1}" if first else None,
                        token_ids=PROMPT[first * BLOCK:(first + count) * BLOCK], block_size=BLOCK)
    return ENCODER.encode(KVEventBatch(ts=100.0, events=[event]))


def removed(*hashes: str) -> bytes:
    return ENCODER.encode(KVEventBatch(ts=100.0, events=[BlockRemoved(block_hashes=list(hashes))]))


def feed(replay: str | None = None) -> EventFeed:
    return EventFeed(0, "tcp://unused", HeldBlocks(1), replay=replay, wall_clock=lambda: 100.5)


async def test_batches_in_order_build_the_index_and_evictions_shrink_it() -> None:
    events = feed()
    await events.receive(0, stored(0, 2))
    await events.receive(1, stored(2, 2))
    assert events.index.held(KEYS) == [4]
    await events.receive(2, removed("h2"))
    assert events.index.held(KEYS) == [2]
    assert events.state.batches == 3 and events.state.lag_s == 0.5 and events.state.block_size == BLOCK


async def test_a_restarted_engine_is_forgotten_and_a_gap_without_replay_forgets_the_replica() -> None:
    events = feed()
    await events.receive(5, stored(0, 4))
    await events.receive(0, stored(0, 1))  # numbering from 0 again: a new engine process, an empty cache
    assert events.index.held(KEYS) == [1] and events.state.restarts == 1
    await events.receive(3, stored(1, 1))  # batches 1 and 2 lost: whatever they evicted is unknown
    assert events.state.missed == 2
    assert events.index.held(KEYS) == [0]  # forgotten, and block 1's parent with it


async def test_an_undecodable_batch_forgets_the_replica() -> None:
    events = feed()
    await events.receive(0, stored(0, 4))
    await events.receive(1, b"\x93not a batch")
    assert events.index.held(KEYS) == [0] and events.state.undecodable == 1


@asynccontextmanager
async def replay_socket(kept: dict[int, bytes]) -> AsyncIterator[tuple[zmq.asyncio.Context, str, list[int]]]:
    """An engine's replay socket (a ZeroMQ ROUTER, answering as vLLM's does) that still keeps the batches
    ``kept``: yields a context for the feed, the socket's address, and the start numbers it was asked for."""
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    asked: list[int] = []

    async def serve() -> None:
        while True:
            client, _, start = await router.recv_multipart()
            asked.append(int.from_bytes(start, "big"))
            for seq in sorted(kept):
                if seq >= asked[-1]:
                    await router.send_multipart([client, b"", b"kv", seq.to_bytes(8, "big"), kept[seq]])
            await router.send_multipart([client, b"", b"", REPLAY_END, b""])

    serving = asyncio.create_task(serve())
    try:
        yield context, f"tcp://127.0.0.1:{port}", asked
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        router.close(0)
        context.term()


async def test_lost_batches_are_asked_again_from_the_replay_socket() -> None:
    async with replay_socket({1: stored(2, 1), 2: stored(3, 1)}) as (context, address, asked):
        events = feed(replay=address)
        await events.receive(0, stored(0, 2), context)
        await events.receive(3, removed("h0"), context)  # 1 and 2 missed: replayed before this one
        assert asked == [1] and events.state.replayed == 2 and events.state.missed == 0
        assert events.index.held(KEYS) == [0]  # h0 removed last, after the replayed blocks 2 and 3
        events.index.stored(0, None, ["h0"], PROMPT[:BLOCK], BLOCK)
        assert events.index.held(KEYS) == [4]  # the replayed blocks were there, chained after block 1


async def test_a_replay_that_cannot_give_every_lost_batch_forgets_the_replica() -> None:
    async with replay_socket({2: stored(3, 1)}) as (context, address, _):  # of the lost 1 and 2, only 2 kept
        events = feed(replay=address)
        await events.receive(0, stored(0, 2), context)
        await events.receive(3, stored(2, 1), context)
        assert events.state.missed == 2 and events.state.replayed == 0
        assert events.index.held(KEYS) == [0]


async def test_a_feed_joining_a_running_engine_learns_what_it_still_keeps() -> None:
    async with replay_socket({0: stored(0, 2), 1: stored(2, 1)}) as (context, address, asked):
        events = feed(replay=address)
        await events.receive(2, stored(3, 1), context)  # the first batch this feed hears is the engine's third
        assert asked == [0] and events.index.held(KEYS) == [4] and events.state.missed == 0
