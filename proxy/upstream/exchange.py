"""One upstream exchange, relayed to the client as it arrives.

proxy/upstream/call.py's UpstreamCall chooses the replica; this sends the request there and relays
the answer. Streamed chunks go out as the upstream sent them (no re-framing, no
re-serializing); a stream that breaks after its first byte ends with an SSE error event, since
the status line is already gone; a client that leaves closes the upstream connection at once.
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from typing import Any

import orjson
from starlette.types import Send

from policies.answer_cache import completion_from_stream
from policies.refusals import UpstreamFailed
from policies.retry import retry_within_budget, retryable
from policies.usage import hide_usage_events, stream_events, streamed_completion_tokens, usage_in
from proxy.admission.request_admission import Admission, Admitted
from proxy.caches.answers import AnswerStore, storable
from proxy.http.disconnect import DisconnectWatch
from proxy.http.errors import OpenAIError, openai_error, sse_error_event
from proxy.http.sse_keepalive import KeepAlive
from proxy.observability.access_log import AccessLog
from proxy.observability.metrics import Metrics
from proxy.retrieval.fallback import send_passages_answer
from proxy.transports.base import Reply, UpstreamBroken, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from proxy.upstream.pool import Pool
from proxy.upstream.replica import Replica

MIN_RETRY_CONCURRENCY = 3  # retries a pool may run at once however few requests it has
CLIENT_CLOSED = 499  # nginx's code for "client closed the request", used in metrics only
_DONE = b"data: [DONE]"
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies in front not to buffer the stream
]


def _failure(error: UpstreamError, pool: Pool) -> OpenAIError:
    if isinstance(error, UpstreamTimeout):
        return openai_error(UpstreamFailed(pool.name, "timeout"))
    if isinstance(error, UpstreamUnreachable):
        return openai_error(UpstreamFailed(pool.name, "unreachable"))
    return openai_error(UpstreamFailed(pool.name, "broken"))


class Exchange:
    """One request's exchange with a replica: the state of the call, the retry and the relay.
    proxy/upstream/call.py's UpstreamCall adds where it goes (slot, replica, overflow) around it."""

    __slots__ = ("admission", "admitted", "answer_key", "answer_ttl", "answers", "body", "entry", "fallback", "gate",
                 "headers", "hide_usage", "holds_slot", "keepalive", "key", "log", "metrics", "model", "path", "pool",
                 "replica", "route", "started", "status", "stream", "streamed", "taken_at", "tenant", "url", "usage")

    def __init__(
        self, *, pool: Pool, key: int | None, tenant: str, path: str, body: bytes, stream: bool,
        route: str, metrics: Metrics, started: float, headers: list[tuple[bytes, bytes]] | None = None,
        model: str = "", fallback: str | None = None,
        answers: AnswerStore | None = None, answer_key: str | None = None, answer_ttl: float = 0.0,
        admission: Admission | None = None, admitted: Admitted | None = None,
        log: AccessLog | None = None, entry: dict[str, Any] | None = None, hide_usage: bool = False,
    ) -> None:
        self.pool = pool
        self.key = key  # the prompt's affinity key, for the replica choice
        self.tenant = tenant  # for the queue's fairness
        self.replica: Replica | None = None  # chosen once a slot is held
        self.path = path
        self.url = ""
        self.body = body
        self.stream = stream
        self.route = route
        self.metrics = metrics
        self.started = started
        self.headers = headers or []  # prefixgate's own response headers, added to the upstream's
        self.model = model
        self.fallback = fallback  # retrieved evidence to answer with if the model cannot
        self.answers = answers  # with answer_key: store this answer for exact repeats
        self.answer_key = answer_key
        self.answer_ttl = answer_ttl
        self.status = CLIENT_CLOSED
        self.admission = admission  # with admitted: told the usage when the answer ends
        self.admitted = admitted
        self.usage: tuple[int | None, int | None] = (None, None)  # (prompt, completion) tokens, where known
        self.hide_usage = hide_usage  # the gateway asked for the stream's usage event; the client did not
        self.taken_at: float | None = None  # when the first replica took it (perf_counter)
        self.streamed: float | None = None  # seconds from a stream's first chunk to its last
        self.gate = pool.gate  # when set, a slot of it is held (holds_slot) until the exchange ends
        self.holds_slot = False
        self.keepalive: KeepAlive | None = None  # ticks while a stream waits for its first chunk
        self.log = log  # with entry: the access log, and this request's line so far
        self.entry = entry

    def _count_error(self, kind: str) -> None:
        replica = self.replica.base_url if self.replica is not None else "none"
        self.metrics.upstream_error(self.pool.name, replica, kind)

    def _take(self, replica: Replica) -> None:
        if self.taken_at is None:
            self.taken_at = perf_counter()
        replica.take()
        self.replica = replica
        self.url = replica.base_url + self.path

    @property
    def _committed(self) -> bool:
        """A keep-alive has sent the status line: what follows can only be SSE events."""
        return self.keepalive is not None and self.keepalive.started

    async def _exchange(self, send: Send, watch: DisconnectWatch) -> None:
        timeouts = self.pool.timeouts
        reply: Reply | None = None
        complete = False  # body read to its end: the connection may go back to the pool
        waiting = True  # for the first byte; one timer serves both deadlines (one fewer per request)
        now = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout_at(now + min(timeouts.first_byte, timeouts.total)) as deadline:
                reply = await self._post()
                streaming = self.stream and reply.status == 200
                first = await reply.next_chunk() if streaming else b""
                waiting = False
                if self.keepalive is not None:
                    await self.keepalive.stop()
                deadline.reschedule(now + timeouts.total)
                if streaming:
                    await self._relay_stream(send, watch, reply, first)
                elif self._committed:
                    await self._relay_error_event(send, watch, reply)
                else:
                    await self._relay_whole(send, watch, reply)
                complete = True
        except (UpstreamError, TimeoutError) as exc:
            if isinstance(exc, UpstreamError):
                error = exc
            else:
                error = UpstreamTimeout("no first byte in time" if waiting else "total timeout")
            self._count_error(error.kind)
            # Slow is load, not ill health (active checks catch a hung replica); _post counted refusals.
            if error.kind not in ("timeout", "connect") and self.replica is not None:
                self.replica.failed()
            watch.finished = True
            if self.keepalive is not None:
                await self.keepalive.stop()
            fresh = self.status == CLIENT_CLOSED and not self._committed  # nothing sent yet
            if fresh and self.fallback is not None and error.kind in ("timeout", "connect"):
                self.status = 200
                await send_passages_answer(send, model=self.model, evidence=self.fallback, stream=self.stream,
                                           reason="upstream_" + error.kind)
            elif fresh:  # a proper status code
                failure = _failure(error, self.pool)
                self.status = failure.status
                await failure.send(send)
            else:
                if self.status == CLIENT_CLOSED:  # only keep-alives went out
                    self.status = _failure(error, self.pool).status
                event = sse_error_event(
                    f"Upstream stream ended early ({error.kind}).", "upstream_error", "upstream_" + error.kind
                )
                await send({"type": "http.response.body", "body": event, "more_body": False})
        finally:
            if reply is not None:
                await reply.close(abort=not complete)

    async def _post(self) -> Reply:
        """Send the request; a refused connection or a 502/503 goes once more to another replica
        (see policies/retry.py), since the client has seen nothing yet."""
        pool = self.pool
        attempt = 0
        try:
            while True:
                replica = self.replica
                assert replica is not None
                try:
                    reply = await replica.transport.post(self.url, self.body)
                except UpstreamUnreachable:
                    replica.failed()
                    if not self._retry_elsewhere(attempt, connect_failed=True, status=0):
                        raise
                else:
                    if reply.status < 500:
                        replica.succeeded()
                        return reply
                    replica.failed()
                    if not self._retry_elsewhere(attempt, connect_failed=False, status=reply.status):
                        return reply
                    await reply.close(abort=True)
                if attempt == 0:
                    pool.retry_started()
                attempt += 1
        finally:
            if attempt:
                pool.retry_ended()

    def _retry_elsewhere(self, attempt: int, *, connect_failed: bool, status: int) -> bool:
        """Move this request to another replica if the failure, the budget and the pool allow it."""
        pool = self.pool
        if not retryable(connect_failed=connect_failed, status=status, attempt=attempt, attempts=pool.retries):
            return False
        if attempt == 0 and not retry_within_budget(pool.retrying, pool.in_flight(), pool.retry_budget,
                                              MIN_RETRY_CONCURRENCY):
            return False
        assert self.replica is not None
        other = pool.alternate(self.replica)
        if other is None:
            return False
        self.replica.release()
        self._take(other)
        self.metrics.upstream_retry(pool.name)
        return True

    async def _store(self, completion: dict | None) -> None:
        if completion is not None and storable(completion):
            assert self.answers is not None and self.answer_key is not None
            await self.answers.put(self.answer_key, completion, self.answer_ttl)

    async def _relay_whole(self, send: Send, watch: DisconnectWatch, reply: Reply) -> None:
        body = await reply.read()
        if reply.status == 200:
            self.usage = usage_in(body)
        if self.answer_key is not None and reply.status == 200:
            try:
                await self._store(orjson.loads(body))
            except orjson.JSONDecodeError:
                pass
        if reply.status >= 500:
            self._count_error("status_5xx")
        self.status = reply.status
        await send({
            "type": "http.response.start",
            "status": reply.status,
            "headers": [
                (b"content-type", reply.content_type.encode("latin-1")),
                (b"content-length", str(len(body)).encode()),
                *self.headers,
            ],
        })
        watch.finished = True
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _relay_error_event(self, send: Send, watch: DisconnectWatch, reply: Reply) -> None:
        """The engine refused a stream after keep-alives went out with a 200: its error as the last event."""
        body = await reply.read()
        self.status = reply.status
        if reply.status >= 500:
            self._count_error("status_5xx")
        try:
            error = orjson.loads(body).get("error")
        except (orjson.JSONDecodeError, AttributeError):
            error = None
        if isinstance(error, dict):
            event = b"data: " + orjson.dumps({"error": error}) + b"\n\n"
        else:
            event = sse_error_event(f"Upstream answered HTTP {reply.status}.", "upstream_error",
                                    f"upstream_status_{reply.status}")
        watch.finished = True
        await send({"type": "http.response.body", "body": event, "more_body": False})

    async def _relay_stream(self, send: Send, watch: DisconnectWatch, reply: Reply, first: bytes) -> None:
        self.status = 200
        if not self._committed:
            headers = [*SSE_HEADERS, *self.headers] if self.headers else SSE_HEADERS
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        first_at = perf_counter()
        if first:
            self.metrics.observe_ttft(self.route, first_at - self.started)
        chunk = first
        tail = b""
        kept: list[bytes] | None = [] if self.answer_key is not None else None  # for the answer store
        events = 0
        held = b""  # the start of an event not yet whole, while hiding the usage event
        while chunk:
            tail = tail[-480:] + chunk[-512:]
            events += stream_events(chunk)
            if kept is not None:
                kept.append(chunk)
            if self.hide_usage:
                chunk, held = hide_usage_events(held + chunk if held else chunk)
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = await reply.next_chunk()
        if held:
            await send({"type": "http.response.body", "body": held, "more_body": True})
        self.streamed = perf_counter() - first_at
        prompt, completion = usage_in(tail)  # present when the client asked for include_usage
        self.usage = (prompt, completion if completion is not None else streamed_completion_tokens(events))
        if _DONE not in tail:
            raise UpstreamBroken("stream closed without [DONE]")
        if kept is not None:
            await self._store(completion_from_stream(b"".join(kept)))
        watch.finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

