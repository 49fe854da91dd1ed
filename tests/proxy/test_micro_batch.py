"""The micro-batcher: concurrent callers share calls, each gets its own result, a failure reaches only
the callers it belongs to, and nothing hangs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from proxy.micro_batch import MicroBatcher
from tests.support.embedders import CountingEmbedder
from tests.support.waiting import wait_until_async


async def test_concurrent_questions_share_calls_and_each_gets_its_own_vector() -> None:
    embedder = CountingEmbedder()
    sizes: list[int] = []
    batcher = MicroBatcher(embedder.embed, max_batch=8, max_wait=0.005, on_batch=sizes.append)
    texts = ["x" * n for n in range(1, 21)]
    vectors = await asyncio.gather(*(batcher.submit(text) for text in texts))
    assert vectors == [[float(n)] for n in range(1, 21)]
    assert len(embedder.calls) == 3 and max(sizes) == 8 and sum(sizes) == 20


async def test_texts_arriving_while_a_batch_runs_go_together_next() -> None:
    embedder = CountingEmbedder(held=True)
    windows: list[asyncio.TimerHandle] = []

    def call_later(delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        windows.append(asyncio.get_running_loop().call_later(delay, callback))
        return windows[-1]

    batcher = MicroBatcher(embedder.embed, max_batch=32, max_wait=0.001, call_later=call_later)
    first = asyncio.ensure_future(batcher.submit("first"))
    await wait_until_async(lambda: embedder.calls, timeout=5, interval=0.001, what="the first batch to reach the model")
    late = []
    for i in range(5):  # each in a turn of its own, all while the first batch is in the model (held there)
        late.append(asyncio.ensure_future(batcher.submit(f"late {i}")))
        await asyncio.sleep(0)  # one event-loop turn: the item is in, and no window opened for it
    assert len(windows) == 1  # the first item's: later ones wait for the running batch, not for a window
    embedder.release()
    await asyncio.gather(first, *late)
    assert embedder.calls == [["first"], [f"late {i}" for i in range(5)]]


async def test_a_lone_question_waits_only_the_short_window() -> None:
    embedder = CountingEmbedder()
    batcher = MicroBatcher(embedder.embed, max_batch=32, max_wait=0.001)
    assert await asyncio.wait_for(batcher.submit("alone"), timeout=1) == [5.0]


async def test_a_failed_batch_fails_all_its_callers_and_the_next_batch_still_runs() -> None:
    embedder = CountingEmbedder(fail=True)
    batcher = MicroBatcher(embedder.embed, max_batch=4, max_wait=0.002)
    results = await asyncio.gather(*(batcher.submit(str(i)) for i in range(3)), return_exceptions=True)
    assert all(isinstance(result, RuntimeError) for result in results)
    embedder.fail = False
    assert await batcher.submit("again") == [5.0]
    with pytest.raises(RuntimeError):
        embedder.fail = True
        await batcher.submit("boom")


async def test_an_exception_in_an_items_place_fails_that_caller_alone() -> None:
    async def halve(numbers: list[int]) -> list[float | Exception]:
        return [ValueError(f"{n} is odd") if n % 2 else n / 2 for n in numbers]

    batcher: MicroBatcher[int, float] = MicroBatcher(halve, max_batch=8)
    results = await asyncio.gather(*(batcher.submit(n) for n in range(4)), return_exceptions=True)
    assert results[0] == 0 and results[2] == 1
    assert isinstance(results[1], ValueError) and str(results[1]) == "1 is odd"
    assert isinstance(results[3], ValueError) and batcher.batches == 1
