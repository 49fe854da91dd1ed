"""ConnectionGuard's bookkeeping, driven by a fake clock and fake connections: which connection a
deadline or the cap closes, and which it never touches (one being answered)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import pytest

from proxy.config.server import ConnectionLimits, default_max_connections
from proxy.connections.guard import CloseReason, ConnectionGuard

BODY_TIMEOUT = CloseReason.BODY_TIMEOUT
EVICTED = CloseReason.EVICTED
HEADER_TIMEOUT = CloseReason.HEADER_TIMEOUT
IDLE = CloseReason.IDLE
OVER_CAPACITY = CloseReason.OVER_CAPACITY


class Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Clock:
    """Time that moves only when a test says, firing due timers in order as the event loop would."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[Timer] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while due := [timer for timer in self.timers if not timer.cancelled and timer.when <= end]:
            timer = min(due, key=lambda t: t.when)
            self.timers.remove(timer)
            self.now = max(self.now, timer.when)
            timer.callback()
        self.now = end


class Events:
    def __init__(self) -> None:
        self.open = 0
        self.dropped_by: Counter[str] = Counter()

    def opened(self) -> None:
        self.open += 1

    def closed(self) -> None:
        self.open -= 1

    def dropped(self, reason: str) -> None:
        self.dropped_by[reason] += 1


class Connection:
    """Closes the way GuardedHttpToolsProtocol does: the guard hears of it through closed()."""

    def __init__(self, guard: ConnectionGuard, name: str) -> None:
        self.guard = guard
        self.name = name
        self.expired: str | None = None

    def expire(self, reason: str) -> str:
        self.expired = reason
        self.guard.closed(self)
        return reason

    def __repr__(self) -> str:
        return self.name


def being_answered(guard: ConnectionGuard, name: str) -> Connection:
    """A connection whose whole request is in: its answer is under way."""
    connection = Connection(guard, name)
    guard.opened(connection)
    guard.headers_received(connection)
    guard.body_received(connection)
    return connection


def make_guard(header: float = 10, body: float = 30, keepalive: float = 5,
               cap: int = 100) -> tuple[ConnectionGuard, Clock, Events]:
    clock, events = Clock(), Events()
    guard = ConnectionGuard(ConnectionLimits(header, body, keepalive, cap), events, clock=lambda: clock.now,
                            call_later=clock.call_later)  # type: ignore[arg-type]
    return guard, clock, events


def test_headers_not_in_by_the_deadline_close_the_connection() -> None:
    guard, clock, events = make_guard(header=10)
    slow = Connection(guard, "slow")
    guard.opened(slow)
    clock.advance(4)
    quick = being_answered(guard, "quick")
    clock.advance(5.9)
    assert slow.expired is None
    clock.advance(0.2)
    assert slow.expired == HEADER_TIMEOUT and quick.expired is None
    assert events.dropped_by == {HEADER_TIMEOUT: 1} and events.open == 1


def test_body_deadline_counts_from_the_headers_and_answers_are_never_cut() -> None:
    guard, clock, _ = make_guard(header=10, body=30)
    trickle, answered = Connection(guard, "trickle"), Connection(guard, "answered")
    for connection in (trickle, answered):
        guard.opened(connection)
        clock.advance(9)
        guard.headers_received(connection)
    guard.body_received(answered)  # its answer now streams for an hour
    clock.advance(20)  # 29 s after the trickle's headers
    assert trickle.expired is None
    clock.advance(1.1)
    assert trickle.expired == BODY_TIMEOUT
    clock.advance(3600)
    assert answered.expired is None


def test_a_kept_alive_connection_gets_a_fresh_header_deadline_from_its_next_request() -> None:
    guard, clock, _ = make_guard(header=10)
    connection = being_answered(guard, "kept")
    clock.advance(60)  # a long answer
    guard.answered(connection)
    clock.advance(4.9)  # idle between requests, within the keep-alive deadline
    assert connection.expired is None
    guard.request_begun(connection)
    clock.advance(9.9)
    assert connection.expired is None
    clock.advance(0.2)
    assert connection.expired == HEADER_TIMEOUT


def test_a_new_connection_keeps_its_deadline_from_when_it_opened() -> None:
    """A byte at 9.9 s must not buy another 10 s."""
    guard, clock, _ = make_guard(header=10)
    connection = Connection(guard, "dribble")
    guard.opened(connection)
    clock.advance(9.9)
    guard.request_begun(connection)
    clock.advance(0.2)
    assert connection.expired == HEADER_TIMEOUT


def test_at_the_cap_a_new_connection_closes_the_one_that_waited_longest() -> None:
    guard, clock, events = make_guard(cap=3)
    busy = being_answered(guard, "busy")  # never evicted
    old, newer = Connection(guard, "old"), Connection(guard, "newer")
    clock.advance(1)
    guard.opened(old)
    clock.advance(1)
    guard.opened(newer)
    clock.advance(1)
    assert guard.opened(Connection(guard, "new")) is True
    assert (busy.expired, old.expired, newer.expired) == (None, EVICTED, None)
    assert events.dropped_by == {EVICTED: 1} and guard.open == 3


def test_idle_kept_alive_connections_are_evicted_before_newer_slow_ones() -> None:
    guard, clock, _ = make_guard(cap=2)
    kept, slow = being_answered(guard, "kept"), Connection(guard, "slow")
    guard.answered(kept)
    clock.advance(2)
    guard.opened(slow)
    guard.opened(Connection(guard, "new"))
    assert (kept.expired, slow.expired) == (EVICTED, None)


def test_over_the_cap_with_every_connection_answered_the_new_one_is_not_admitted() -> None:
    guard, _, events = make_guard(cap=2)
    for name in ("a", "b"):
        being_answered(guard, name)
    assert guard.opened(Connection(guard, "c")) is False
    guard.refused()
    assert events.dropped_by == {OVER_CAPACITY: 1}


def test_a_closed_connection_leaves_no_deadline_behind() -> None:
    guard, clock, events = make_guard(header=10)
    connection = Connection(guard, "gone")
    guard.opened(connection)
    guard.closed(connection)
    clock.advance(60)
    assert connection.expired is None and events.open == 0 and not events.dropped_by


def test_a_burst_of_closes_is_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    guard, clock, _ = make_guard(header=1)
    for index in range(50):
        guard.opened(Connection(guard, str(index)))
    with caplog.at_level(logging.WARNING, logger="prefixgate"):
        clock.advance(30)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "50 client connections" in lines[0] and "header_timeout 50" in lines[0]


def test_the_automatic_cap_leaves_descriptors_for_upstream_connections() -> None:
    assert default_max_connections(1024) == 384
    assert default_max_connections(20_000) == 9_872
    assert default_max_connections(1 << 20) == 10_000


def test_a_kept_alive_connection_that_begins_no_next_request_is_closed_at_the_keepalive_deadline() -> None:
    """Bytes that begin no request (a bare line break) reset uvicorn's own keep-alive timer, not this one."""
    guard, clock, events = make_guard(keepalive=5)
    connection = being_answered(guard, "lingering")
    guard.answered(connection)
    clock.advance(4.9)
    assert connection.expired is None
    clock.advance(0.2)
    assert connection.expired == IDLE and events.dropped_by == {IDLE: 1}


def test_a_request_begun_during_an_answer_gets_its_header_deadline_when_the_answer_ends() -> None:
    guard, clock, _ = make_guard(header=10, keepalive=5)
    connection = being_answered(guard, "pipelining")
    clock.advance(60)  # answering; the next request's first bytes arrive meanwhile
    guard.answered(connection, request_begun=True)
    clock.advance(9.9)  # past the keep-alive deadline: it is waiting for headers, not idle
    assert connection.expired is None
    clock.advance(0.2)
    assert connection.expired == HEADER_TIMEOUT


def test_a_connection_waits_in_one_table_at_a_time() -> None:
    """Headers that follow an answer take the connection out of the idle table: its next answer, however
    long, is neither expired as idle nor evicted."""
    guard, clock, _ = make_guard(header=10, keepalive=5, cap=2)
    streaming = being_answered(guard, "streaming")
    guard.answered(streaming)
    guard.headers_received(streaming)  # its next request's headers, begun before the answer ended
    guard.body_received(streaming)  # now streaming an answer
    clock.advance(3600)
    other = Connection(guard, "other")
    guard.opened(other)
    assert guard.opened(Connection(guard, "third")) is True  # evicts `other`, the only one waiting
    assert (streaming.expired, other.expired) == (None, EVICTED)


def test_a_probe_over_the_cap_is_not_evicted_by_the_next_newcomer() -> None:
    guard, clock, _ = make_guard(header=10, cap=1)
    busy = being_answered(guard, "busy")
    probe, flood = Connection(guard, "probe"), Connection(guard, "flood")
    assert guard.opened(probe) is False
    assert guard.opened(flood) is False
    assert (busy.expired, probe.expired, flood.expired) == (None, None, None)
    clock.advance(10.1)  # probes-only connections still have the header deadline
    assert (busy.expired, probe.expired, flood.expired) == (None, HEADER_TIMEOUT, HEADER_TIMEOUT)
