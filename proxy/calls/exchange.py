"""One request's HTTP exchange with a pool's replicas, relayed to the client as it arrives.

``UpstreamCall`` takes a slot and a replica, then hands the exchange over to an ``Exchange``: it
POSTs the body (a refused connection or a 502/503 goes once more to another replica, since the
client has seen nothing yet) and relays the answer. Streamed chunks go out as the upstream sent
them (no re-framing, no re-serializing); a stream that breaks after its first byte ends with an SSE
error event, since the status line is already gone; a client that leaves closes the upstream
connection at once. What it learns (status, usage, stream time) goes into the call's ``Outcome``.
"""

from __future__ import annotations

from time import perf_counter

import orjson

from policies.answers.answer_cache import completion_from_stream
from policies.answers.usage import hide_usage_events, stream_events, streamed_completion_tokens, usage_in
from policies.refusals import Rejection, UpstreamFailed, UpstreamFailure
from policies.routing.retry import retry_within_budget, retryable
from proxy.caches.answers import AnswerToStore
from proxy.calls.degraded import answer_with_passages
from proxy.calls.outgoing import Outcome, Outgoing
from proxy.observability.request_record import RequestRecord
from proxy.transports.base import Reply, UpstreamBroken, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from proxy.upstream.placement import ExchangePool
from proxy.upstream.replica import Replica
from proxy.wire.answer import ClientAnswer

MIN_RETRY_CONCURRENCY = 3  # retries a pool may run at once however few requests it has
_DONE = b"data: [DONE]"


def _failure_kind(error: UpstreamError) -> UpstreamFailure:
    if isinstance(error, UpstreamTimeout):
        return "timeout"
    return "unreachable" if isinstance(error, UpstreamUnreachable) else "broken"


class Exchange:
    __slots__ = ("client", "out", "outcome", "pool", "record", "replica", "store")

    def __init__(self, pool: ExchangePool, replica: Replica, out: Outgoing, outcome: Outcome, record: RequestRecord,
                 client: ClientAnswer, store: AnswerToStore | None) -> None:
        self.pool = pool
        self.replica = replica  # the one that holds the request: the first one taken, or a retry's
        self.out = out
        self.outcome = outcome
        self.record = record
        self.client = client  # what goes to the client (a keep-alive's or an earlier leg's status line, maybe)
        self.store = store  # where to store this answer for exact repeats

    async def run(self) -> None:
        timeouts = self.pool.timeouts
        reply: Reply | None = None
        complete = False  # body read to its end: the connection may go back to the pool
        waiting = True  # for the first byte; one timer serves both deadlines (one fewer per request)
        clock = self.pool.clock
        now = clock()
        try:
            async with clock.deadline(now + min(timeouts.first_byte, timeouts.total)) as deadline:
                reply = await self._post()
                streaming = self.out.stream and reply.status == 200
                first = await reply.next_chunk() if streaming else b""
                waiting = False
                deadline.reschedule(now + timeouts.total)
                if streaming:
                    complete = await self._relay_stream(reply, first)
                else:
                    if self.client.started:
                        await self._relay_error_event(reply)
                    else:
                        await self._relay_whole(reply)
                    complete = True
        except (UpstreamError, TimeoutError) as exc:
            error = exc if isinstance(exc, UpstreamError) else UpstreamTimeout(
                "no first byte in time" if waiting else "total timeout")
            await self._failed(error)
        finally:
            if reply is not None:
                await reply.close(abort=not complete)

    async def _failed(self, error: UpstreamError) -> None:
        """The exchange failed: the passages answer, else the failure as the client's answer can still take it
        (its status and error JSON, or after the first byte the stream's last event, with the same code)."""
        self._count_error(error.kind)
        # Slow is load, not ill health (active checks catch a hung replica); _post counted refusals.
        if error.kind not in ("timeout", "connect"):
            self.replica.failed()
        if not self.client.started and self.out.fallback is not None and error.kind in ("timeout", "connect"):
            await answer_with_passages(self.client, self.out, self.out.fallback, "upstream_" + error.kind)
        else:
            await self.client.fail(UpstreamFailed(self.pool.name, _failure_kind(error)))

    def _count_error(self, kind: str) -> None:
        self.record.metrics.upstream_error(self.pool.name, self.replica.base_url, kind)

    async def _post(self) -> Reply:
        """Send the request; a refused connection or a 502/503 goes once more to another replica
        (``retryable``), since the client has seen nothing yet."""
        pool = self.pool
        attempt = 0
        try:
            while True:
                replica = self.replica
                try:
                    reply = await replica.transport.post(replica.base_url + self.out.path, self.out.body)
                except UpstreamUnreachable:
                    replica.failed()
                    if not self._retry_elsewhere(replica, attempt, connect_failed=True, status=0):
                        raise
                else:
                    if reply.status < 500:
                        replica.succeeded()
                        return reply
                    replica.failed()
                    if not self._retry_elsewhere(replica, attempt, connect_failed=False, status=reply.status):
                        return reply
                    await reply.close(abort=True)
                if attempt == 0:
                    pool.retry_started()
                attempt += 1
        finally:
            if attempt:
                pool.retry_ended()

    def _retry_elsewhere(self, replica: Replica, attempt: int, *, connect_failed: bool, status: int) -> bool:
        """Move this request to another replica if the failure, the budget and the pool allow it."""
        pool = self.pool
        if not retryable(connect_failed=connect_failed, status=status, attempt=attempt, attempts=pool.retries):
            return False
        if attempt == 0 and not retry_within_budget(pool.retrying, pool.in_flight(), pool.retry_budget,
                                                    MIN_RETRY_CONCURRENCY):
            return False
        other = pool.alternate(replica)
        if other is None:
            return False
        replica.release()
        other.take()
        self.replica = self.outcome.replica = other
        self.record.metrics.upstream_retry(pool.name)
        return True

    async def _store(self, completion: dict | None) -> None:
        if self.store is not None:
            await self.store.put(completion)

    async def _relay_whole(self, reply: Reply) -> None:
        body = await reply.read()
        if reply.status == 200 and self.out.tap is not None:
            tapped, self.outcome.usage = await self.out.tap.whole(body)
            if tapped is None:  # the answer goes on in another leg: nothing goes out yet
                return
            body = tapped
        elif reply.status == 200:
            self.outcome.usage = usage_in(body)
            if self.store is not None:
                try:
                    await self._store(orjson.loads(body))
                except orjson.JSONDecodeError:
                    pass
        if reply.status >= 500:
            self._count_error("status_5xx")
        await self.client.whole(reply.status, reply.content_type.encode("latin-1"), body)

    async def _relay_error_event(self, reply: Reply) -> None:
        """The engine refused a stream after keep-alives went out with a 200: its own error as the last event,
        where it wrote one, recorded with its status."""
        body = await reply.read()
        if reply.status >= 500:
            self._count_error("status_5xx")
        event = self.client.errors.engine_event(body)
        if event is None:
            await self.client.fail(Rejection(reply.status, f"Upstream answered HTTP {reply.status}.",
                                             code=f"upstream_status_{reply.status}", type="upstream_error"))
            return
        await self.client.end(event, status=reply.status)

    async def _relay_stream(self, reply: Reply, first: bytes) -> bool:
        """Relay the stream; False where the tap cut it off (the rest of the reply is not read)."""
        client = self.client
        await client.open_stream()
        first_at = self.outcome.first_chunk
        if first_at is None:
            first_at = self.outcome.first_chunk = perf_counter()
            if first:
                self.record.metrics.observe_ttft(self.record.route, first_at - self.record.started)
        chunk = first
        tail = b""
        kept: list[bytes] | None = [] if self.store is not None else None  # for the answer store
        events = 0
        held = b""  # the start of an event not yet whole, while hiding the usage event
        hide_usage = self.out.hide_usage
        tap = self.out.tap
        while chunk:
            tail = tail[-480:] + chunk[-512:]
            events += stream_events(chunk)
            if tap is not None:
                chunk = tap.relay(chunk)
            if kept is not None:
                kept.append(chunk)
            if hide_usage:
                chunk, held = hide_usage_events(held + chunk if held else chunk)
            if chunk:
                await client.event(chunk)
            if tap is not None and tap.cut_off:
                break
            chunk = await reply.next_chunk()
        if held:
            await client.event(held)
        self.outcome.streamed = perf_counter() - first_at
        if tap is not None:
            self.outcome.usage = tap.stream_usage(events)
            if not tap.ended:
                raise UpstreamBroken("stream closed before its last event")
            last, ends = await tap.stream_done()
            if not ends:  # the answer goes on in another leg
                if last:
                    await client.event(last)
                return True
            await client.end(last)
            return not tap.cut_off
        prompt, completion = usage_in(tail)  # present when the client asked for include_usage
        self.outcome.usage = (prompt, completion if completion is not None else streamed_completion_tokens(events))
        if _DONE not in tail:
            raise UpstreamBroken("stream closed without [DONE]")
        if kept is not None:
            await self._store(completion_from_stream(b"".join(kept)))
        await client.end()
        return True
