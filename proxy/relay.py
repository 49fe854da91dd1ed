"""One upstream exchange, relayed to the client as it arrives.

Returned by a route as its response: the ASGI call sends the request to the chosen replica and
relays the answer. Streamed chunks go out as the upstream sent them (no re-framing, no
re-serializing); a stream that breaks after its first byte ends with an SSE error event, since
the status line is already gone; a client that leaves closes the upstream connection at once.
"""

from __future__ import annotations

import asyncio
from time import perf_counter

import orjson
from starlette.types import Receive, Scope, Send

from policies.answer_cache import completion_from_stream
from policies.retry import retryable, within_budget
from policies.usage import stream_events, streamed_completion_tokens, usage_in
from proxy.admission import Admission, Admitted
from proxy.answer_store import AnswerStore, storable
from proxy.backpressure import PoolGate
from proxy.disconnect import DisconnectWatch
from proxy.errors import OpenAIError, sse_error_event
from proxy.fallback import send_passages_answer
from proxy.metrics import Metrics
from proxy.transport import Reply, UpstreamBroken, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from proxy.upstream import Pool, Replica

MIN_RETRY_CONCURRENCY = 3  # retries a pool may run at once however few requests it has
CLIENT_CLOSED = 499  # nginx's code for "client closed the request", used in metrics only
_DONE = b"data: [DONE]"
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies in front not to buffer the stream
]


def _failure(error: UpstreamError, pool: Pool) -> OpenAIError:
    if isinstance(error, UpstreamTimeout):
        return OpenAIError(504, f"Upstream pool '{pool.name}' did not answer in time.", code="upstream_timeout")
    if isinstance(error, UpstreamUnreachable):
        return OpenAIError(
            502, f"Upstream pool '{pool.name}' is unreachable.", code="upstream_unreachable",
            headers={"Retry-After": "1"},
        )
    return OpenAIError(502, f"Upstream pool '{pool.name}' broke off its answer.", code="upstream_broken")


class UpstreamCall:
    """An ASGI response that performs the upstream exchange when Starlette sends it."""

    __slots__ = ("admission", "admitted", "answer_key", "answer_ttl", "answers", "body", "fallback", "gate",
                 "headers", "metrics", "model", "path", "pool", "replica", "route", "started", "status", "stream",
                 "url", "usage")

    def __init__(
        self, *, pool: Pool, replica: Replica, path: str, body: bytes, stream: bool,
        route: str, metrics: Metrics, started: float, headers: list[tuple[bytes, bytes]] | None = None,
        model: str = "", fallback: str | None = None,
        answers: AnswerStore | None = None, answer_key: str | None = None, answer_ttl: float = 0.0,
        admission: Admission | None = None, admitted: Admitted | None = None, gate: PoolGate | None = None,
    ) -> None:
        self.pool = pool
        self.replica = replica
        self.path = path
        self.url = replica.base_url + path
        self.body = body
        self.stream = stream
        self.route = route
        self.metrics = metrics
        self.started = started
        self.headers = headers or []  # prefixgate's own response headers, added to the upstream's
        self.model = model
        self.fallback = fallback  # retrieved evidence to answer with if the model cannot (see proxy/fallback.py)
        self.answers = answers  # with answer_key: store this answer for exact repeats
        self.answer_key = answer_key
        self.answer_ttl = answer_ttl
        self.status = CLIENT_CLOSED
        self.admission = admission  # with admitted: told the usage when the answer ends
        self.admitted = admitted
        self.usage: tuple[int | None, int | None] = (None, None)  # (prompt, completion) tokens, where known
        self.gate = gate  # holds one of the pool's slots until the exchange ends

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.replica.in_flight += 1
        watch = DisconnectWatch(receive)
        try:
            async with watch:
                await self._exchange(send, watch)
        except OSError:  # uvicorn's ClientDisconnected: the client left between two writes
            watch.gone = True
        finally:
            if watch.gone:
                self.status = CLIENT_CLOSED
            self.replica.in_flight -= 1  # the replica that took it last, after any retry
            if self.gate is not None:
                self.gate.release()
            self.metrics.observe_request(self.route, self.status, perf_counter() - self.started)
            if self.admission is not None:
                assert self.admitted is not None
                await self.admission.finish(self.admitted, self.pool.name, *self.usage)

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
                deadline.reschedule(now + timeouts.total)
                if streaming:
                    await self._relay_stream(send, watch, reply, first)
                else:
                    await self._relay_whole(send, watch, reply)
                complete = True
        except (UpstreamError, TimeoutError) as exc:
            if isinstance(exc, UpstreamError):
                error = exc
            else:
                error = UpstreamTimeout("no first byte in time" if waiting else "total timeout")
            self.metrics.upstream_error(self.pool.name, error.kind)
            # Slow is load, not ill health (active checks catch a hung replica); _post counted refusals.
            if error.kind not in ("timeout", "connect"):
                self.replica.failed()
            watch.finished = True
            if self.status == CLIENT_CLOSED and self.fallback is not None and error.kind in ("timeout", "connect"):
                self.status = 200
                await send_passages_answer(send, model=self.model, evidence=self.fallback, stream=self.stream,
                                           reason="upstream_" + error.kind)
            elif self.status == CLIENT_CLOSED:  # nothing sent yet: a proper status code
                failure = _failure(error, self.pool)
                self.status = failure.status
                await failure.send(send)
            else:
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
                    pool.retrying += 1
                attempt += 1
        finally:
            if attempt:
                pool.retrying -= 1

    def _retry_elsewhere(self, attempt: int, *, connect_failed: bool, status: int) -> bool:
        """Move this request to another replica if the failure, the budget and the pool allow it."""
        pool = self.pool
        if not retryable(connect_failed=connect_failed, status=status, attempt=attempt, attempts=pool.retries):
            return False
        if attempt == 0 and not within_budget(pool.retrying, pool.in_flight(), pool.retry_budget,
                                              MIN_RETRY_CONCURRENCY):
            return False
        other = pool.alternate(self.replica)
        if other is None:
            return False
        self.replica.in_flight -= 1
        other.in_flight += 1
        self.replica = other
        self.url = other.base_url + self.path
        self.metrics.upstream_retry(pool.name)
        return True

    async def _store(self, completion: dict | None) -> None:
        if completion is not None and storable(completion):
            assert self.answers is not None and self.answer_key is not None
            await self.answers.put(self.answer_key, completion, self.answer_ttl)

    async def _relay_whole(self, send: Send, watch: DisconnectWatch, reply: Reply) -> None:
        body = await reply.read()
        if self.admission is not None and reply.status == 200:
            self.usage = usage_in(body)
        if self.answer_key is not None and reply.status == 200:
            try:
                await self._store(orjson.loads(body))
            except orjson.JSONDecodeError:
                pass
        if reply.status >= 500:
            self.metrics.upstream_error(self.pool.name, "status_5xx")
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

    async def _relay_stream(self, send: Send, watch: DisconnectWatch, reply: Reply, first: bytes) -> None:
        self.status = 200
        headers = [*_SSE_HEADERS, *self.headers] if self.headers else _SSE_HEADERS
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if first:
            self.metrics.observe_ttft(self.route, perf_counter() - self.started)
        chunk = first
        tail = b""
        kept: list[bytes] | None = [] if self.answer_key is not None else None  # for the answer store
        counting = self.admission is not None
        events = 0
        while chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tail = tail[-480:] + chunk[-512:] if counting else tail[-16:] + chunk[-32:]
            if counting:
                events += stream_events(chunk)
            if kept is not None:
                kept.append(chunk)
            chunk = await reply.next_chunk()
        if counting:
            prompt, completion = usage_in(tail)  # present when the client asked for include_usage
            self.usage = (prompt, completion if completion is not None else streamed_completion_tokens(events))
        if _DONE not in tail:
            raise UpstreamBroken("stream closed without [DONE]")
        if kept is not None:
            await self._store(completion_from_stream(b"".join(kept)))
        watch.finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

