"""Turn the single calls of concurrent requests into batches, for work that costs less per item in bulk.

The retriever runs two: question embeddings (one forward pass over 32 texts costs a fraction of 32
passes over one) and vector searches (one trip to the Qdrant thread, or one gRPC call to a server,
for all the questions of an embedding batch instead of one each). The Redis rate limiter runs one
for its script calls (one pipeline, one round trip, for a burst of requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class MicroBatcher(Generic[Item, Result]):
    """Coalesce the items of concurrent callers into batches of at most ``max_batch``.

    One batch runs at a time. While it runs, new items wait and go together as the next batch the
    moment it ends; with nothing running, an item goes at once (items that arrive in the same
    event-loop turn go together), or after ``max_wait`` seconds if that is set, and a full batch
    goes at once. Measured (docs/benchmarks.md): batching only while busy costs a lone question
    nothing, where a fixed 3 ms window cost it more than that.

    ``run_batch`` answers a list of items with a list of results in the same order; an exception
    in an item's place fails that caller alone, an exception raised fails the whole batch.
    """

    def __init__(
        self, run_batch: Callable[[list[Item]], Awaitable[Sequence[Result | Exception]]], *,
        max_batch: int = 32, max_wait: float = 0.0, on_batch: Callable[[int], None] | None = None,
        call_later: Callable[[float, Callable[[], None]], asyncio.TimerHandle] | None = None,
    ) -> None:
        self.run_batch = run_batch
        self.on_batch = on_batch  # told each batch's size (the gateway feeds a histogram)
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.batches = 0  # how many batches ran (tests read it)
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False
        self._running: set[asyncio.Task[None]] = set()
        self._call_later = call_later  # the event loop's, unless a test schedules the window itself

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((item, future))
        if not self._busy:
            if len(self._pending) >= self.max_batch:
                self._flush()
            elif self._timer is None:
                self._timer = (self._call_later or loop.call_later)(self.max_wait, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._busy or not self._pending:
            return
        batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        self._busy = True
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(len(batch))
        try:
            results = await self.run_batch([item for item, _ in batch])
        except Exception as exc:  # every caller of the batch gets the failure; none hangs
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        else:
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        finally:
            self._busy = False
            self._flush()  # whatever arrived meanwhile has already waited long enough
