"""What goes to the client: one ``ClientAnswer`` per request owns it, in the role uvicorn's
``RequestResponseCycle`` plays for a server.

It holds the answer's status and headers (the ``ResponseHeaders`` the request's steps reported, sent on
every answer, errors included), whether anything went out, the one SSE header set, the keep-alives, and the
one way a failure becomes an error: the API's error JSON while nothing went out, else an SSE error event as
the stream's last, since a status line cannot be taken back. The steps, the call, the pools, the answer
cache and the passages fallback hand it data (a status and a body, or a stream's events); nothing else in
the gateway writes an ASGI response message (``tests/test_structure.py`` fails on one).
"""

from __future__ import annotations

from starlette.types import Send

from policies.refusals import Refusal
from proxy.clock import Clock
from proxy.wire.errors import OPENAI_ERRORS, ErrorShape
from proxy.wire.headers import ResponseHeaders
from proxy.wire.sse_keepalive import KeepAlive

JSON = b"application/json"
SSE = b"text/event-stream; charset=utf-8"
SSE_HEADERS = (
    (b"content-type", SSE),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies in front not to buffer the stream
)


class ClientAnswer:
    """One request's answer to its client: written only through these methods, read by the call and the
    request's record (``status``, ``started``) and the disconnect watch (``finished``)."""

    __slots__ = ("_send", "errors", "finished", "headers", "keepalive", "started", "status")

    def __init__(self, send: Send, headers: ResponseHeaders | None = None,
                 errors: ErrorShape = OPENAI_ERRORS) -> None:
        self._send = send
        self.headers = headers if headers is not None else ResponseHeaders()
        self.errors = errors  # the API's own error shape (its JSON body, its stream's error event)
        self.status: int | None = None  # the answer's status as recorded; None: nothing answered yet
        self.started = False  # the status line went out (a keep-alive's, maybe): only SSE events may follow
        self.finished = False  # the last write is under way: a disconnect from here on is the server's own
        self.keepalive: KeepAlive | None = None

    def keep_alive(self, interval: float, clock: Clock) -> None:
        """Keep-alives (SSE comments; the API's own ping event where it has one) every ``interval`` seconds of
        ``clock`` until the answer's first write."""
        self.keepalive = KeepAlive(self._beat, interval, clock, self.errors.keepalive)
        self.keepalive.start()

    async def _beat(self, comment: bytes) -> None:
        """A keep-alive's tick: the stream's status line the first time (its status is not yet the answer's:
        a refusal may follow as an event), then the comment."""
        if not self.started:
            self.started = True
            await self._send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *self.headers]})
        await self._send({"type": "http.response.body", "body": comment, "more_body": True})

    async def _quiet(self) -> None:
        """Stop the keep-alives before a real write (a tick under way finishes first), so writes never interleave."""
        if self.keepalive is not None:
            await self.keepalive.stop()

    def close(self) -> None:
        """The request is over: no keep-alive tick need finish."""
        if self.keepalive is not None:
            self.keepalive.cancel()

    async def whole(self, status: int, content_type: bytes, body: bytes,
                    extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """A whole answer: its status line with the steps' headers (and ``extra``: an error's own), then its body."""
        await self._quiet()
        self.status = status
        self.started = True
        await self._send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", content_type), (b"content-length", str(len(body)).encode()), *self.headers, *extra]})
        self.finished = True
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def open_stream(self) -> None:
        """A stream's status line (200, the SSE headers and the steps'), unless a keep-alive or an earlier leg
        sent it already; from here the answer's status is 200."""
        await self._quiet()
        self.status = 200
        if not self.started:
            self.started = True
            await self._send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *self.headers]})

    async def event(self, chunk: bytes) -> None:
        """Part of an open stream, as it goes."""
        await self._send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def end(self, last: bytes = b"", *, status: int | None = None) -> None:
        """The stream's last bytes; ``status``: the status it is recorded with, where it is not the 200 it
        opened with (an engine's refusal after keep-alives)."""
        await self._quiet()
        if status is not None:
            self.status = status
        self.finished = True
        await self._send({"type": "http.response.body", "body": last, "more_body": False})

    async def fail(self, refusal: Refusal) -> None:
        """The answer ends with ``refusal``: its error JSON and status while nothing went out, else the stream's
        last event (recorded with the refusal's status where only keep-alives went out). Nothing once the
        answer went out whole."""
        if self.finished:
            return
        error = self.errors.error(refusal)
        if not self.started:
            await self.whole(error.status, JSON, error.body(), error.header_pairs())
        else:
            await self.end(self.errors.event(error), status=error.status if self.status is None else None)
