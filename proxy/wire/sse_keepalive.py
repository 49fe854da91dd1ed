"""SSE comment keep-alives while a stream waits for its first token.

A streaming request can wait long before its first token: in the pool's queue, then in the
engine's prefill. Load balancers and client libraries with idle timeouts (60 s is common) cut a
connection that carries no bytes for that long. With ``stream_keepalive`` set on a pool, the
gateway answers 200 with SSE headers once a stream has waited that long and sends a comment line
(``: keep-alive``) each interval until the first chunk; SSE clients, OpenAI's SDKs included,
skip comment lines. The price: once the status line is out, a later refusal or upstream error
can only be an SSE error event, so the interval should exceed a typical wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from proxy.clock import Clock

COMMENT = b": keep-alive\n\n"


class KeepAlive:
    """Ticks from a task of its own, so the waiting code awaits its queue slot or first chunk as
    usual; stopped before the first real write, so its writes never interleave with the answer's."""

    __slots__ = ("_stop", "_task", "beat", "clock", "interval", "tick")

    def __init__(self, beat: Callable[[bytes], Awaitable[None]], interval: float, clock: Clock,
                 tick: bytes = COMMENT) -> None:
        self.tick = tick  # what each beat writes: a comment, or the API's ping event (Anthropic's)
        self.beat = beat  # writes a comment (``ClientAnswer``: the stream's status line first)
        self.interval = interval  # seconds of ``clock``, the pool's
        self.clock = clock
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            try:
                async with self.clock.deadline(self.clock() + self.interval):
                    await self._stop.wait()
                return
            except TimeoutError:
                pass
            try:
                await self.beat(self.tick)
            except OSError:  # the client left; the request's own disconnect watch ends it
                return

    async def stop(self) -> None:
        """Let a tick under way finish its write, then end the ticks."""
        task, self._task = self._task, None
        if task is not None:
            self._stop.set()
            await task

    def cancel(self) -> None:
        """The request is over by an error or the client's leaving: no tick need finish."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
