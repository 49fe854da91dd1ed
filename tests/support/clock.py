"""A clock a test moves forward, for ``create_app(clock=...)``: back-offs, retry pauses and the gateway's
timers (queue timeouts, upstream timeouts, keep-alives, health checks) run out without the test sleeping
through them.

``FakeClock`` keeps the ``proxy.clock.Clock`` protocol: a sleep or a deadline waits on a timer that only
``advance`` makes due. Due timers go off in deadline order, each on its own event loop (``advance`` may
be called from the test's thread while the gateway runs on another: TestClient's, or uvicorn's). An
advance past several intervals wakes a sleeper once, and what it arms next counts from the new time, as
for a process that was paused.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson
from starlette.testclient import TestClient


class _Timer:
    __slots__ = ("cancelled", "loop", "order", "wake", "when")

    def __init__(self, when: float, order: int, wake: Callable[[], None], loop: asyncio.AbstractEventLoop) -> None:
        self.when = when
        self.order = order  # of two timers due at once, the first set goes off first
        self.wake = wake
        self.loop = loop
        self.cancelled = False

    def __lt__(self, other: _Timer) -> bool:
        return (self.when, self.order) < (other.when, other.order)

    def go_off(self) -> None:
        """From the timer's loop, as asyncio's own timers are; a closed loop has nobody left to wake."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.wake()


class FakeDeadline:
    """``asyncio.timeout_at``'s behaviour on a ``FakeClock``: when the clock passes ``when`` the body's
    task is cancelled, and the block turns that cancellation (its own, not another's) into TimeoutError."""

    __slots__ = ("_cancelling", "_clock", "_expired", "_task", "_timer", "_when")

    def __init__(self, clock: FakeClock, when: float | None) -> None:
        self._clock = clock
        self._when = when
        self._task: asyncio.Task[object] | None = None
        self._timer: _Timer | None = None
        self._expired = False
        self._cancelling = 0

    def when(self) -> float | None:
        return self._when

    def expired(self) -> bool:
        return self._expired

    def reschedule(self, when: float | None) -> None:
        if self._timer is not None:
            self._timer.cancelled = True
            self._timer = None
        self._when = when
        if when is not None and self._task is not None:
            self._timer = self._clock.at(when, self._expire)

    def _expire(self) -> None:
        assert self._task is not None
        self._expired = True
        self._task.cancel()

    async def __aenter__(self) -> FakeDeadline:
        task = asyncio.current_task()
        assert task is not None, "a deadline is entered from a task"
        self._task, self._cancelling = task, task.cancelling()
        self.reschedule(self._when)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancelled = True
            self._timer = None
        assert self._task is not None
        if self._expired and self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from error


class FakeClock:
    """Monotonic seconds that change only when ``advance`` says so; sleeps and deadlines wait on them."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        self._timers: list[_Timer] = []  # a heap, earliest first; cancelled ones are dropped when due
        self._order = itertools.count()
        self._lock = threading.Lock()  # the test's thread advances, the gateway's loop arms timers

    def __call__(self) -> float:
        return self._now

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time on and set off every timer now due, earliest first."""
        with self._lock:
            self._now += seconds
            due = []
            while self._timers and self._timers[0].when <= self._now:
                due.append(heapq.heappop(self._timers))
        for timer in due:
            timer.go_off()

    def at(self, when: float, wake: Callable[[], None]) -> _Timer:
        """Call ``wake`` on the running loop once the clock reaches ``when`` (soon, if it has)."""
        timer = _Timer(when, next(self._order), wake, asyncio.get_running_loop())
        with self._lock:
            if when > self._now:
                heapq.heappush(self._timers, timer)
                return timer
        timer.go_off()
        return timer

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        timer = self.at(self._now + seconds, wake)
        try:
            await woken
        finally:
            timer.cancelled = True

    def deadline(self, when: float | None) -> FakeDeadline:
        return FakeDeadline(self, when)


async def settle(turns: int = 50) -> None:
    """Let the running loop run what is ready, and what that makes ready, without moving any clock: after
    an ``advance``, what its timers set off has happened (or, before a deadline, has not)."""
    for _ in range(turns):
        await asyncio.sleep(0)


def settled(client: TestClient) -> None:
    """``settle`` the loop an in-memory gateway runs on (TestClient's), from the test's thread."""
    assert client.portal is not None, "the TestClient is entered (its lifespan runs)"
    client.portal.call(settle)


@contextmanager
def meanwhile(clock: FakeClock) -> Iterator[Callable[..., Future[Any]]]:
    """``submit`` for blocking calls (a TestClient's requests) run on threads while the test moves ``clock``.
    On the way out the clock moves on a day at a time until every call has returned, so whatever still
    waits on it ends: a failed test fails rather than waiting forever for its threads."""
    submitted: list[Future[Any]] = []

    def submit(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        submitted.append(threads.submit(call, *args, **kwargs))
        return submitted[-1]

    with ThreadPoolExecutor(4) as threads:
        try:
            yield submit
        finally:
            while wait(submitted, timeout=0.05).not_done:
                clock.advance(24 * 3600)


CHUNKS = [b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]


@dataclass
class ClockedEngine:
    """Every replica's transport, an engine whose work takes time on ``clock``: the status line comes
    ``head_s`` seconds after the post, the answer's first chunk with it, each further one ``chunk_s`` after
    the last (None: never). It notes when it was given up on (its wait cancelled: a timeout went off) and
    when each health check came."""

    clock: FakeClock
    head_s: float | None = 0.0
    chunk_s: float | None = 0.0
    chunks: list[bytes] = field(default_factory=lambda: list(CHUNKS))
    posts: int = 0
    given_up: list[float] = field(default_factory=list)  # the clock's time at each cancelled wait
    checks: list[tuple[str, float]] = field(default_factory=list)  # (health URL, the clock's time)

    def __call__(self, *, connect_timeout: float, headers: Mapping[str, str], max_connections: int,
                 keepalive: float) -> ClockedEngine:
        return self

    async def wait(self, seconds: float | None) -> None:
        try:
            if seconds is None:
                await asyncio.get_running_loop().create_future()
            elif seconds:
                await self.clock.sleep(seconds)
        except asyncio.CancelledError:
            self.given_up.append(self.clock())
            raise

    async def post(self, url: str, body: bytes) -> ClockedReply:
        self.posts += 1
        await self.wait(self.head_s)
        stream = orjson.loads(body).get("stream", False)
        if stream:
            return ClockedReply(self, "text/event-stream", list(self.chunks))
        answer = {"id": "c", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
        return ClockedReply(self, "application/json", [orjson.dumps(answer)])

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        if url.endswith("/health"):
            self.checks.append((url, self.clock()))
            return 200, b""
        return 404, b""

    async def aclose(self) -> None:
        pass


@dataclass
class ClockedReply:
    engine: ClockedEngine
    content_type: str
    chunks: list[bytes]
    status: int = 200
    sent: int = 0

    async def read(self) -> bytes:
        body, self.chunks = b"".join(self.chunks), []
        return body

    async def next_chunk(self) -> bytes:
        if self.sent:
            await self.engine.wait(self.engine.chunk_s)
        self.sent += 1
        return self.chunks.pop(0) if self.chunks else b""

    async def close(self, *, abort: bool) -> None:
        self.chunks = []
