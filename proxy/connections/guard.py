"""Deadlines and a cap for client connections, so slow or idle clients cannot hold the gateway.

uvicorn closes a kept-alive connection that stays idle between requests, but it has no deadline for
receiving a request: a client that sends a header line every few seconds, or announces a body and
trickles it a byte at a time, keeps its connection and file descriptor for ever, and ASGI middleware
only runs once the headers are in. So these rules sit at the protocol level: each connection's
``GuardedHttpToolsProtocol`` reports its state changes to its process's ``ConnectionGuard``, which

- closes a connection whose request headers are not complete ``header_timeout`` seconds after it opened,
  or after the request's first byte on a kept-alive connection (with a 408 when a request had begun);
- closes one whose body is not complete ``body_timeout`` seconds after its headers (408 while no answer
  has started);
- closes a kept-alive connection that has not begun a next request ``keepalive_timeout`` seconds after
  its last answer (uvicorn's own keep-alive timer is reset by any byte, even a bare line break);
- caps open connections at ``max_connections``: past the cap, a new connection closes the connection that
  has waited longest for its request (slow, idle or kept-alive; never one being answered), so a flood of
  slow connections cannot lock new clients out. When every connection is being answered, the new one
  may ask only for a probe (it gets its own deadline and is never evicted); anything else is answered 503
  ``too_many_connections``.

A connection sits in at most one of the guard's tables, by what it waits for; one being answered is in
none, so answers are never cut. Each table is an insertion-ordered dict stamped with the time of entry,
so its first entry is its oldest and the next deadline is found without a scan; one timer per process is
set for the nearest deadline. A request costs a few dict operations and no timer handle.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from policies.vocabulary import Vocabulary
from proxy.config.server import ConnectionLimits

log = logging.getLogger("prefixgate")


class CloseReason(Vocabulary):
    """Why the guard closes (or refuses) a connection: the values of prefixgate_connections_closed_total's
    ``reason`` label. The metric's help is written from it."""

    IDLE = "idle", "sent nothing by server.header_timeout_s, or no next request by server.keepalive_timeout_s"
    HEADER_TIMEOUT = "header_timeout", "began a request whose headers were not all in by server.header_timeout_s"
    BODY_TIMEOUT = "body_timeout", "headers in, body not complete by server.body_timeout_s"
    EVICTED = "evicted", "waited longest for its request when server.max_connections needed its place"
    OVER_CAPACITY = "over_capacity", "opened while every connection was being answered at server.max_connections: 503"


SLACK_S = 0.05  # the timer fires this late, so deadlines that fall together expire in one pass
REPORT_EVERY_S = 10.0  # at most one log line per this many seconds of closes


class Guarded(Protocol):
    """A connection the guard can close: ``GuardedHttpToolsProtocol``, or a fake in tests."""

    def expire(self, reason: CloseReason) -> CloseReason:
        """Close now; return the reason to count (a header deadline that saw no byte is ``idle``)."""
        ...


class ConnectionEvents(Protocol):
    """Where the guard reports (``ConnectionMetrics``)."""

    def opened(self) -> None: ...

    def closed(self) -> None: ...

    def dropped(self, reason: CloseReason) -> None: ...


def raise_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit (as Go's runtime does: a soft limit of
    1,024 is a relic) and return it; worker processes started later inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a container may forbid it, or the hard limit is unlimited: keep the soft one
            pass
    return soft


def file_limit() -> int:
    """This process's soft open-file limit (unlimited counts as a million)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


class ConnectionGuard:
    """One per process (the app carries it; each uvicorn worker builds its own app). Not thread-safe:
    every call comes from the event loop's protocol callbacks."""

    def __init__(self, limits: ConnectionLimits, events: ConnectionEvents, *,
                 clock: Callable[[], float] = time.monotonic,
                 call_later: Callable[[float, Callable[[], None]], asyncio.TimerHandle] | None = None) -> None:
        self.limits = limits
        self.events = events
        self.clock = clock
        self._call_later = call_later  # None: the running loop's
        self.open = 0
        self._headers: dict[Guarded, float] = {}  # awaiting a request's headers: since connect or first byte
        self._bodies: dict[Guarded, float] = {}  # headers in, awaiting the body: since the headers
        self._idle: dict[Guarded, float] = {}  # kept alive, awaiting a next request: since the last answer
        self._probes: dict[Guarded, float] = {}  # opened over the cap, awaiting headers; never evicted
        # (table, timeout, reason) for each deadline; the first three tables are the evictable ones
        self._deadlines = ((self._headers, limits.header_timeout, CloseReason.HEADER_TIMEOUT),
                           (self._bodies, limits.body_timeout, CloseReason.BODY_TIMEOUT),
                           (self._idle, limits.keepalive_timeout, CloseReason.IDLE),
                           (self._probes, limits.header_timeout, CloseReason.HEADER_TIMEOUT))
        self._tables = tuple(table for table, _, _ in self._deadlines)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._unreported: Counter[str] = Counter()
        self._report: asyncio.TimerHandle | None = None

    # ---- what the protocol reports ----------------------------------------------------------------

    def opened(self, connection: Guarded) -> bool:
        """A new connection, waiting for its headers from now. False when it is over the cap and every
        other connection is being answered: it may then ask only for a probe."""
        self.open += 1
        self.events.opened()
        table = self._headers
        if self.open > self.limits.max_connections:
            victim = self._longest_waiting()
            if victim is None:
                table = self._probes
            else:
                self._expire(victim, CloseReason.EVICTED)
        self._wait(connection, table, self.limits.header_timeout)
        return table is self._headers

    def request_begun(self, connection: Guarded) -> None:
        """The first byte of a request on a kept-alive connection starts its header deadline; a new
        connection's deadline still counts from when it opened."""
        if connection in self._idle:
            self._wait(connection, self._headers, self.limits.header_timeout)

    def headers_received(self, connection: Guarded) -> None:
        """The headers of the request to answer next are in: its body's deadline starts now."""
        self._wait(connection, self._bodies, self.limits.body_timeout)

    def body_received(self, connection: Guarded) -> None:
        """The request is whole and is being answered: no deadline until the answer is complete."""
        self._forget(connection)

    def answered(self, connection: Guarded, request_begun: bool = False) -> None:
        """An answer is complete and the connection stays open. It waits for a next request, or, when one
        began arriving during the answer, for that request's headers, from now."""
        if request_begun:
            self._wait(connection, self._headers, self.limits.header_timeout)
        else:
            self._wait(connection, self._idle, self.limits.keepalive_timeout)

    def closed(self, connection: Guarded) -> None:
        self.open -= 1
        self.events.closed()
        self._forget(connection)

    def refused(self) -> None:
        """A connection over the cap asked for something other than a probe and got 503."""
        self._count(CloseReason.OVER_CAPACITY)

    # ---- deadlines and room -------------------------------------------------------------------------

    def expire_due(self) -> None:
        """Close every connection past its deadline, then set the timer for the next one."""
        self._timer = None
        now = self.clock()
        for table, timeout, reason in self._deadlines:
            while table:
                connection, since = next(iter(table.items()))
                if since + timeout > now:
                    break
                self._expire(connection, reason)
        heads = [next(iter(table.values())) + timeout for table, timeout, _ in self._deadlines if table]
        if heads:
            self._arm(min(heads))

    def _wait(self, connection: Guarded, table: dict[Guarded, float], timeout: float) -> None:
        """Move ``connection`` to the end of ``table`` (out of any other), stamped now."""
        self._forget(connection)
        now = self.clock()
        table[connection] = now
        if self._timer is None or now + timeout < self._timer_at:  # the check _arm makes, without the call
            self._arm(now + timeout)

    def _arm(self, deadline: float) -> None:
        if self._timer is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        call_later = self._call_later or asyncio.get_running_loop().call_later
        self._timer_at = deadline
        self._timer = call_later(max(0.0, deadline - self.clock()) + SLACK_S, self.expire_due)

    def _longest_waiting(self) -> Guarded | None:
        """The evictable connection that entered its wait (for headers, a body or a next request) first."""
        heads = [next(iter(table.items())) for table, _, _ in self._deadlines[:3] if table]
        return min(heads, key=lambda head: head[1])[0] if heads else None

    def _expire(self, connection: Guarded, reason: CloseReason) -> None:
        self._forget(connection)
        self._count(connection.expire(reason))

    def _forget(self, connection: Guarded) -> None:
        for table in self._tables:
            if table.pop(connection, None) is not None:
                return

    # ---- reporting ----------------------------------------------------------------------------------

    def _count(self, reason: CloseReason) -> None:
        self.events.dropped(reason)
        self._unreported[reason] += 1
        if self._report is None:
            call_later = self._call_later or asyncio.get_running_loop().call_later
            self._report = call_later(REPORT_EVERY_S, self._log_burst)

    def _log_burst(self) -> None:
        """One line per burst of closes, not one per connection: a flood would flood the log too."""
        self._report = None
        counts, self._unreported = self._unreported, Counter()
        log.warning("closed or refused %d client connections in the last %.0f s (%s); %d open, cap %d",
                    sum(counts.values()), REPORT_EVERY_S,
                    ", ".join(f"{reason} {count}" for reason, count in counts.most_common()),
                    self.open, self.limits.max_connections)
