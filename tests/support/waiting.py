"""Wait for a state instead of sleeping for a guess at how long it takes.

``wait_until`` polls a condition from a test's thread, ``wait_until_async`` from a coroutine. Both
return the condition's first truthy value and fail the test with a message naming what they waited
for (and, given ``state``, what it read when time ran out). An exception the condition raises (an
assertion that the process it waits on is still alive, say) ends the wait at once.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

T = TypeVar("T")


def _timed_out(what: str, timeout: float, state: Callable[[], object] | None) -> AssertionError:
    message = f"timed out after {timeout:g} s waiting for {what}"
    if state is not None:
        message += f"; last seen: {state()!r}"
    return AssertionError(message)


def wait_until(condition: Callable[[], T], *, timeout: float, what: str, interval: float = 0.05,
               state: Callable[[], object] | None = None) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something truthy; return that.

    Fails (AssertionError) when ``timeout`` seconds pass first, naming ``what`` and, if given, the
    value of ``state()`` then."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, state)
        time.sleep(interval)


async def wait_until_async(condition: Callable[[], T | Awaitable[T]], *, timeout: float, what: str,
                           interval: float = 0.05, state: Callable[[], object] | None = None) -> T:
    """``wait_until`` for a coroutine: the event loop runs on between checks. ``condition`` may be a
    plain function or return an awaitable (a coroutine function, or ``asyncio.to_thread`` of a blocking
    check)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if loop.time() >= deadline:
            raise _timed_out(what, timeout, state)
        await asyncio.sleep(interval)


def answers(url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 2) -> bool:
    """A condition for ``wait_until``: ``url`` answers 200. With ``process``, the wait fails at once if
    that process has exited, instead of running out its timeout."""
    if process is not None:
        assert process.poll() is None, f"the process serving {url} exited with {process.returncode}"
    try:
        return httpx.get(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False
