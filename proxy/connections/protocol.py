"""uvicorn's httptools protocol, reporting each connection's state to the app's ``ConnectionGuard``.

The guard needs to know when a request begins, when its headers and body are in and when its answer
is complete; only the protocol sees those moments (ASGI starts after the headers). This subclass adds
one guard call at each and ``expire``, which the guard calls to close a connection. The guard comes
from the app (``FastPath.connection_guard``), so each uvicorn worker uses the one its own app built;
``serve`` passes this class as uvicorn's ``http`` option.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from policies.refusals import RequestTimeout, TooManyConnections
from proxy.connections.guard import CloseReason, ConnectionGuard
from proxy.wire.answer import ClientAnswer
from proxy.wire.errors import openai_error

PROBES = frozenset({"/health", "/ready", "/metrics"})  # answered even over the cap


def _timeout_response(reason: CloseReason) -> bytes:
    """A 408 written straight to the socket: the request never reached the app."""
    body = openai_error(RequestTimeout(evicted=reason == CloseReason.EVICTED)).body()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(body), body))


def find_guard(app: Any) -> ConnectionGuard:
    """The guard of the app uvicorn loaded, looking through wrappers uvicorn may add (trace logging)."""
    for _ in range(4):
        guard = getattr(app, "connection_guard", None)
        if guard is not None:
            return guard
        app = getattr(app, "app", None)
    raise TypeError("GuardedHttpToolsProtocol serves apps made by proxy.app.create_app (no connection_guard)")


class ProbesOnly:
    """The app of a connection opened over the cap: probes get the real app, the rest a 503."""

    __slots__ = ("app", "guard")

    def __init__(self, app: ASGIApp, guard: ConnectionGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] in PROBES:
            await self.app(scope, receive, send)
            return
        self.guard.refused()
        await ClientAnswer(send).fail(TooManyConnections())


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.guard = find_guard(self.app)
        self.begun = False  # a request's first byte is in, its headers are not
        self.probes_only = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn narrows it too
        super().connection_made(transport)
        if not self.guard.opened(self):
            self.probes_only = True
            self.app = ProbesOnly(self.app, self.guard)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.closed(self)
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.begun = True
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # one begun during an answer: deadline from its end
            self.guard.request_begun(self)

    def on_headers_complete(self) -> None:
        self.begun = False
        cycle = self.cycle
        queued = cycle is not None and not cycle.response_complete  # pipelined: started when that answer ends
        super().on_headers_complete()
        if not queued:
            self.guard.headers_received(self)
        if self.probes_only or self.parser.should_upgrade():
            # Over the cap: one request per connection. An upgrade (no WebSocket here): the parser reads
            # nothing after it, so the connection cannot carry another request.
            self.cycle.keep_alive = False

    def on_message_complete(self) -> None:
        if not self.pipeline:  # else the request completed is queued, and the connection is being answered
            self.guard.body_received(self)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        queued = self.pipeline[-1][0] if self.pipeline else None  # the request uvicorn starts next
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if queued is None:
            self.guard.answered(self, request_begun=self.begun)
        elif queued.more_body:
            self.guard.headers_received(self)
        else:
            self.guard.body_received(self)

    def expire(self, reason: CloseReason) -> CloseReason:
        """Close now. A request that has begun and has no answer yet gets a 408 first, and its handler
        sees the client leave; a connection that sent nothing is just closed, and so is one in the middle
        of an answer (a body still arriving after its answer began), whose bytes a 408 would corrupt."""
        cycle = self.cycle
        waiting = cycle is not None and not cycle.response_started
        mid_answer = cycle is not None and cycle.response_started and not cycle.response_complete
        if not self.transport.is_closing():
            if (self.begun or waiting) and not mid_answer:
                self.transport.write(_timeout_response(reason))
            self.transport.close()
        if waiting or mid_answer:
            cycle.disconnected = True  # the handler's sends are dropped, its receive says the client left
            cycle.message_event.set()
        return reason if self.begun or waiting or reason != CloseReason.HEADER_TIMEOUT else CloseReason.IDLE
