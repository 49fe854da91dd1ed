"""The clock the shell reads and waits on: back-offs, rate windows, the freshness of readings, and the
timers of a request and of its pool (the queue's timeout, the upstream's first-byte and total timeouts,
SSE keep-alives, active health checks).

It is ``SYSTEM_CLOCK`` unless ``create_app`` is given another: tests pass one they move forward, so a
back-off or a timeout runs out without the test sleeping through it. Policies never read a clock; the
shell passes them ``now``. Latency measurements (``perf_counter``) stay on the real clock.

``SystemClock`` is ``time.monotonic`` for reading and asyncio for waiting. Its deadlines are asyncio's
own ``timeout_at``, handed times of ``time.monotonic``: the stock event loop's ``time()`` *is*
``time.monotonic()``, and uvloop's is libuv's ``uv_now``, the same CLOCK_MONOTONIC in milliseconds read
once per loop turn, so a deadline fires at most about a millisecond late there. Converting would cost
two clock reads per deadline and a wrapper around ``reschedule``, on every request.
"""

from __future__ import annotations

import asyncio
from time import monotonic
from types import TracebackType
from typing import Protocol


class Deadline(Protocol):
    """The body of ``async with clock.deadline(when)`` is cancelled when the clock passes ``when`` and
    the block raises ``TimeoutError``, as ``asyncio.timeout_at``'s does."""

    def reschedule(self, when: float | None) -> None: ...  # None: no deadline

    async def __aenter__(self) -> Deadline: ...

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> bool | None: ...


class Clock(Protocol):
    """Monotonic seconds (``clock()`` or ``clock.now()``), and the waits that run out on them."""

    def __call__(self) -> float: ...

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def deadline(self, when: float | None) -> Deadline: ...


class SystemClock:
    """The real clock: each method is the library function itself, so reading the clock or entering a
    deadline costs no more than calling ``time.monotonic`` or ``asyncio.timeout_at`` directly."""

    __slots__ = ()

    __call__ = staticmethod(monotonic)
    now = staticmethod(monotonic)
    sleep = staticmethod(asyncio.sleep)
    deadline = staticmethod(asyncio.timeout_at)


SYSTEM_CLOCK: Clock = SystemClock()
