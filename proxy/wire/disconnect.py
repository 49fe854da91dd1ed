"""Notice a client that went away while we wait on the upstream, and stop waiting at once.

Starlette's StreamingResponse (ASGI 2.4) only learns of a disconnect when its next write fails,
so a client that leaves during a long prefill would keep the engine busy until the first token.
This watch listens on ``receive`` and cancels the request task; closing the upstream connection
in the caller's ``finally`` then makes vLLM abort the request and free its KV blocks.

On the normal path the watch is never cancelled: once the response is complete the server
answers ``receive`` with ``http.disconnect`` and the watcher returns by itself. Cancelling it
instead would leave a CancelledError, its traceback and frames in a reference cycle on every
request, and the garbage collector's passes over those were the largest latency spikes we measured.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from starlette.types import Receive

from proxy.wire.answer import ClientAnswer


class DisconnectWatch:
    __slots__ = ("_receive", "_task", "_watcher", "answer", "gone")

    def __init__(self, receive: Receive, answer: ClientAnswer) -> None:
        self._receive = receive
        self._task: asyncio.Task[object] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.answer = answer  # its last write under way (``finished``): the server then reports a disconnect itself
        self.gone = False

    async def __aenter__(self) -> DisconnectWatch:
        self._task = asyncio.current_task()
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                if not self.answer.finished and self._task is not None:
                    self.gone = True
                    self._task.cancel()
                return

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        assert self._watcher is not None and self._task is not None
        watcher = self._watcher
        if not watcher.done():
            if self.answer.finished:  # the server has just woken the watcher; let it run first
                asyncio.get_running_loop().call_soon(_cancel_if_pending, watcher)
            else:
                watcher.cancel()
        if self.gone and exc_type is asyncio.CancelledError:
            self._task.uncancel()
            return True
        return False


def _cancel_if_pending(watcher: asyncio.Task[None]) -> None:
    """Backstop for servers that keep ``receive`` waiting after the response is complete."""
    if not watcher.done():
        watcher.cancel()
