"""Where a request goes, and whether it goes now: a slot of the pool (waiting fairly in its queue),
a replica, else the pool it overflows to, else the 503 that sheds it; then the exchange (relay.py)
or, for a pool of kind litellm, the litellm call. Runs under the disconnect watch, so a client
that leaves while queued gives up its place at once.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from time import perf_counter

import orjson
from starlette.types import Receive, Scope, Send

from policies.refusals import Refused, Shed, ShuttingDown
from proxy.http.disconnect import DisconnectWatch
from proxy.http.errors import openai_error, refusal_event, sse_error_event
from proxy.http.sse_keepalive import KeepAlive
from proxy.retrieval.fallback import send_passages_answer
from proxy.upstream.exchange import CLIENT_CLOSED, SSE_HEADERS, Exchange
from proxy.upstream.litellm_pool import LitellmPool


class UpstreamCall(Exchange):
    """An ASGI response that performs the upstream exchange when it is called."""

    __slots__ = ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = DisconnectWatch(receive)
        if self.stream and self.pool.stream_keepalive is not None:
            headers = [*SSE_HEADERS, *self.headers] if self.headers else SSE_HEADERS
            self.keepalive = KeepAlive(send, self.pool.stream_keepalive, headers)
            self.keepalive.start()
        try:
            async with watch:
                await self._dispatch(send, watch)
        except OSError:  # uvicorn's ClientDisconnected: the client left between two writes
            watch.gone = True
        except asyncio.CancelledError:  # not the client leaving (the watch absorbs that): the drain deadline
            with suppress(OSError):
                await self._cut_short(send)
            raise
        finally:
            if self.keepalive is not None:
                self.keepalive.cancel()
            if watch.gone:
                self.status = CLIENT_CLOSED
            if self.replica is not None:
                self.replica.release()  # the replica that took it last, after any retry
            if self.holds_slot:
                self.gate.release()  # type: ignore[union-attr]
            ended = perf_counter()
            label = self.metrics.tenant_label(self.tenant)
            self.metrics.observe_request(self.route, self.status, ended - self.started, label, self.pool.name)
            if self.taken_at is not None:
                self.metrics.observe_stage("upstream", ended - self.taken_at)
            if self.status == 200:
                self.metrics.observe_answer(label, self.pool.name, *self.usage, self.streamed)
            if self.log is not None:
                self._log_line(ended)
            if self.admission is not None:
                assert self.admitted is not None
                if self.replica is None and self.pool.has_replicas:  # no engine work was done
                    await self.admission.release(self.admitted)
                else:
                    await self.admission.finish(self.admitted, self.pool.name, *self.usage)

    async def _cut_short(self, send: Send) -> None:
        """The server stops before this answer is done (server.drain_timeout_s passed): tell the
        client so, in whatever form is still open to it, rather than only dropping the connection."""
        if self.status == CLIENT_CLOSED and not self._committed:  # nothing sent yet
            self.status = 503
            await openai_error(ShuttingDown()).send(send)
        elif self.stream:
            event = sse_error_event("prefixgate shut down before the stream ended; retry the request.",
                                    "server_error", "shutting_down")
            await send({"type": "http.response.body", "body": event, "more_body": False})

    def _log_line(self, ended: float) -> None:
        entry = self.entry
        assert self.log is not None and entry is not None
        entry.update(status=self.status, pool=self.pool.name, replica=self.replica.base_url if self.replica else None,
                     prompt_tokens=self.usage[0], completion_tokens=self.usage[1],
                     duration_ms=round((ended - self.started) * 1000, 3))
        if self.taken_at is not None:
            entry.setdefault("stage_ms", {})["upstream"] = round((ended - self.taken_at) * 1000, 3)
        if self.streamed is not None:
            entry["ttft_ms"] = round((ended - self.started - self.streamed) * 1000, 3)
        if self.log.prompts:
            entry["body"] = orjson.Fragment(self.body)  # as sent upstream, not parsed again
        self.log.write(entry)

    async def _dispatch(self, send: Send, watch: DisconnectWatch) -> None:
        """A slot and a replica of the pool, else of its overflow pool, else the refusal; then the exchange."""
        refusal = await self._enter_or_overflow()
        if refusal is not None:
            watch.finished = True
            await self._refuse(send, refusal)
        elif isinstance(self.pool, LitellmPool):
            await self._via_litellm(self.pool, send, watch)
        else:
            await self._exchange(send, watch)

    async def _enter_or_overflow(self) -> Shed | None:
        """Enter the pool; if it sheds the request, enter its overflow pool instead (once)."""
        for attempt in range(2):
            try:
                await self._enter()
                return None
            except Refused as refused:
                refusal = refused.refusal
                if not isinstance(refusal, Shed):
                    raise
                overflow = self.pool.overflow
                if attempt or overflow is None or self._committed:
                    return refusal
                self.metrics.shed(self.pool.name, f"{refusal.reason}_overflowed")
                self.headers = [h for h in self.headers if h[0] != b"x-prefixgate-pool"]
                self.headers += [(b"x-prefixgate-pool", overflow.name.encode()),
                                 (b"x-prefixgate-overflow", self.pool.name.encode())]
                self.pool, self.gate = overflow, overflow.gate
                self.metrics.pool_chosen(overflow.name, "overflow")
        raise AssertionError("unreachable: the second attempt returns")

    async def _enter(self) -> None:
        """Take a slot of the pool (waiting fairly for one) and a replica; raises the ``Shed`` refusal."""
        if not self.pool.has_replicas:
            return
        if self.gate is not None:
            queued = perf_counter()
            try:
                await self.gate.acquire(self.tenant)
            finally:
                self.metrics.observe_queue_wait(self.pool.name, perf_counter() - queued)
            self.holds_slot = True
        try:
            replica, reason = self.pool.pick(self.key)
            self._take(replica)
            self.metrics.replica_chosen(self.pool.name, replica.base_url, reason)
        except Refused:
            if self.holds_slot:
                self.holds_slot = False
                self.gate.release()  # type: ignore[union-attr]
            raise

    async def _via_litellm(self, pool: LitellmPool, send: Send, watch: DisconnectWatch) -> None:
        if self.keepalive is not None:
            await self.keepalive.stop()
        self.status, self.usage = await pool.relay(send, self.body, stream=self.stream, headers=self.headers,
                                                   head_sent=self._committed)
        watch.finished = True

    async def _refuse(self, send: Send, refusal: Shed) -> None:
        """No slot, or no replica: the error (the passages answer, where the tenant has one and no
        replica is healthy)."""
        if self.keepalive is not None:
            await self.keepalive.stop()
        self.metrics.shed(self.pool.name, refusal.reason)
        error = openai_error(refusal)
        if self.fallback is not None and not self._committed and refusal.reason == "no_healthy_upstream":
            self.status = 200
            await send_passages_answer(send, model=self.model, evidence=self.fallback, stream=self.stream,
                                       reason="no_healthy_upstream")
        elif self._committed:
            self.status = error.status
            await send({"type": "http.response.body", "more_body": False, "body": refusal_event(refusal)})
        else:
            self.status = error.status
            await error.send(send)
