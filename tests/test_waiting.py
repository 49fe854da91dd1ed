"""The shared wait (tests/support/waiting.py): it returns what the condition found, and a wait that runs
out fails naming what it waited for, so a test that waits on a state never passes for want of one."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.support.waiting import wait_until, wait_until_async


def test_it_returns_the_first_truthy_value_of_the_condition() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "done", timeout=5, interval=0, what="three calls") == "done"


def test_running_out_fails_naming_what_it_waited_for_and_the_last_state() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the moon; last seen: 'cheese'"):
        wait_until(lambda: False, timeout=0.05, interval=0.01, what="the moon", state=lambda: "cheese")


def test_an_exception_in_the_condition_ends_the_wait_at_once() -> None:
    def died() -> bool:
        raise AssertionError("the process exited")

    with pytest.raises(AssertionError, match="the process exited"):
        wait_until(died, timeout=60, what="a process that died")


def test_the_async_twin_awaits_a_condition_that_returns_an_awaitable() -> None:
    async def run() -> None:
        counter = itertools.count()
        assert await wait_until_async(lambda: asyncio.to_thread(lambda: next(counter) >= 2), timeout=5,
                                      interval=0, what="two checks off the loop") is True
        with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for nothing"):
            await wait_until_async(lambda: None, timeout=0.05, interval=0.01, what="nothing")

    asyncio.run(run())
