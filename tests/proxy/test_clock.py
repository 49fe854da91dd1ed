"""The system clock and the tests' ``FakeClock`` wait alike: a deadline cancels its body with TimeoutError
when the clock passes it (and only its own cancellation becomes one), ``reschedule`` moves it, and sleepers
wake in the order of their deadlines. The system clock's cases take a tenth of a second of real time."""

from __future__ import annotations

import asyncio

import pytest

from proxy.clock import SYSTEM_CLOCK, Clock
from tests.support.clock import FakeClock, settle

STEP = 0.05  # seconds: the system clock's cases really wait this long


@pytest.fixture(params=["system", "fake"])
def clock(request: pytest.FixtureRequest) -> Clock:
    return SYSTEM_CLOCK if request.param == "system" else FakeClock()


async def _pass(clock: Clock, seconds: float) -> None:
    """Let ``seconds`` pass on ``clock``, and what falls due in them run."""
    if isinstance(clock, FakeClock):
        clock.advance(seconds)
        await settle()
    else:
        await asyncio.sleep(seconds)


async def _hang_until_timeout(clock: Clock) -> str:
    try:
        async with clock.deadline(clock() + STEP) as deadline:
            deadline.reschedule(clock() + 2 * STEP)
            await asyncio.Event().wait()
    except TimeoutError:
        return "timed out"
    return "ended"


async def test_a_deadline_cancels_its_body_with_timeout_error_once_the_clock_passes_it(clock: Clock) -> None:
    task = asyncio.create_task(_hang_until_timeout(clock))
    await settle()
    await _pass(clock, 1.5 * STEP)  # past the first deadline, not the rescheduled one
    assert not task.done()
    await _pass(clock, STEP)
    assert await asyncio.wait_for(task, 5) == "timed out"


async def test_a_cancellation_from_outside_stays_a_cancellation(clock: Clock) -> None:
    task = asyncio.create_task(_hang_until_timeout(clock))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_sleepers_wake_in_the_order_of_their_deadlines(clock: Clock) -> None:
    woken: list[int] = []

    async def sleeper(steps: int) -> None:
        await clock.sleep(steps * STEP / 2)
        woken.append(steps)

    sleepers = [asyncio.create_task(sleeper(steps)) for steps in (3, 1, 2)]
    await settle()
    await _pass(clock, 2 * STEP)
    await asyncio.wait_for(asyncio.gather(*sleepers), 5)
    assert woken == [1, 2, 3]
