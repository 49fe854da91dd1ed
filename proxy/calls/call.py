"""Where a request goes, and whether it goes now: a slot of the pool (waiting fairly in its queue),
a replica, else the pool it overflows to, else the ``Shed`` refusal; then the ``Exchange`` with the
replica or, where the pool picks none (kind litellm), the pool's own ``relay``. Runs under the disconnect
watch, so a client that leaves while queued gives up its place at once. Whatever happens, the slot and the
replica are given back, the request is recorded once, and admission's hold is settled once; and whatever
refuses or fails on the way (a refusal of any kind, a bug) reaches the client as OpenAI's error JSON while
nothing went out, else as the stream's last event, an SSE error.

A call that starts short (``Continuation``) may take two legs: when the short pool's engine stops the answer at
the pool's threshold, the call gives back that pool's slot and replica and enters the long pool with the
continuation, under the same rules (queue, overflow, one retry before the first byte); the client sees one
answer (``ContinuedAnswer``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from time import perf_counter

from starlette.types import Receive
from uvicorn.protocols.utils import ClientDisconnected

from policies.refusals import InternalError, Refusal, Refused, Rejection, Shed, ShuttingDown
from proxy.admission.pool_gate import PoolGate
from proxy.admission.request_admission import AdmissionHold
from proxy.caches.answers import AnswerToStore
from proxy.calls.continued_answer import ContinuedAnswer
from proxy.calls.degraded import answer_with_passages
from proxy.calls.exchange import Exchange
from proxy.calls.outgoing import CLIENT_CLOSED, Outcome, Outgoing
from proxy.observability.request_record import RequestRecord
from proxy.upstream.placement import ExchangePool
from proxy.upstream.pool import Pool
from proxy.wire.answer import JSON, ClientAnswer
from proxy.wire.disconnect import DisconnectWatch

log = logging.getLogger("prefixgate")


@dataclass(frozen=True, slots=True)
class Continuation:
    """How a call that starts short goes on: the long pool, and the long leg as planned for a pool (that one,
    or the pool it overflows to) from the short leg's text."""

    answer: ContinuedAnswer
    long: Pool
    leg: Callable[[Pool, ContinuedAnswer], Outgoing]


class UpstreamCall:
    """The upstream call, performed when it is run with the client's ``receive`` and the request's answer."""

    __slots__ = ("answer", "client", "continuation", "exchanged", "hold", "merged", "merged_in", "out", "outcome",
                 "pool", "record", "replan", "slot", "taken_at", "tenant", "worked")

    def __init__(self, pool: Pool, out: Outgoing, *, tenant: str, record: RequestRecord,
                 hold: AdmissionHold | None = None, answer: AnswerToStore | None = None,
                 replan: Callable[[Pool], tuple[Outgoing, AnswerToStore | None]] | None = None,
                 continuation: Continuation | None = None, merged: bool = False) -> None:
        self.pool = pool
        self.out = out
        self.replan = replan  # the request (and its answer-cache slot) as planned for the overflow pool
        self.tenant = tenant  # for the queue's fairness
        self.record = record
        self.hold = hold  # admission's reservation, settled when the answer ends
        self.answer = answer  # where to store this answer for exact repeats
        self.outcome = Outcome()
        self.slot: PoolGate | None = None  # the gate a slot is held of, until the call ends
        self.taken_at: float | None = None  # when a replica first took it (perf_counter)
        self.client: ClientAnswer | None = None  # what goes to the client, once the call runs
        self.exchanged: ExchangePool | None = None  # the pool whose replica holds the request, as the exchange reads it
        self.continuation = continuation  # where the answer goes on if the short pool's engine cuts it
        self.worked = False  # an earlier leg's engine wrote part of the answer, or the pool's relay was asked
        self.merged = merged  # the merge placed it (pool reason ``merged``): counted in its pool's merged_in_flight
        self.merged_in: Pool | None = None  # the pool it is counted in, while it runs

    async def run(self, receive: Receive, client: ClientAnswer) -> None:
        """Call the pool (or its overflow) and answer the client through ``client``, under the disconnect watch."""
        self.client = client
        if self.merged:
            self._count_merged_in(self.pool)
        watch = DisconnectWatch(receive, client)
        if self.out.stream and self.pool.stream_keepalive is not None:
            client.keep_alive(self.pool.stream_keepalive, self.pool.clock)
        try:
            async with watch:
                await self._dispatch(client)
        except OSError:  # uvicorn's ClientDisconnected: the client left between two writes
            watch.gone = True
        except asyncio.CancelledError:  # not the client leaving (the watch absorbs that): the drain deadline
            with suppress(OSError):
                await client.fail(ShuttingDown())  # the server stops first (server.drain_timeout_s passed)
            raise
        finally:
            await self._end(client, gone=watch.gone)

    async def _end(self, client: ClientAnswer, *, gone: bool) -> None:
        """Give back the keep-alive, the replica and the slot; record the request; settle admission."""
        client.close()
        self._count_merged_in(None)
        outcome = self.outcome
        status = CLIENT_CLOSED if gone or client.status is None else client.status
        if outcome.replica is not None:
            outcome.replica.release()  # the replica that took it last, after any retry
        if self.slot is not None:
            self.slot.release()
        replica = outcome.replica.base_url if outcome.replica is not None else None
        self.record.called(status, replica=replica, usage=outcome.usage, taken_at=self.taken_at,
                           streamed=outcome.streamed, body=self.out.body)
        if self.hold is not None:
            if outcome.replica is None and not self.worked:  # no engine work was done
                await self.hold.give_back()
            else:
                await self.hold.settle(self.pool.name, outcome.usage)

    async def _dispatch(self, client: ClientAnswer) -> None:
        """A slot and a replica of the pool, else of its overflow pool; then the exchange. Whatever refuses
        or fails on the way is answered here, in the form still open to the client (``_refuse``)."""
        refusal: Refusal | None
        try:
            refusal = await self._enter_or_overflow()
            if refusal is None:
                if self.outcome.replica is None or self.exchanged is None:  # the pool picked none: it answers itself
                    await self._relay(client)
                else:
                    exchange = Exchange(self.exchanged, self.outcome.replica, self.out, self.outcome, self.record,
                                        client, self.answer)
                    await exchange.run()
                    if self.continuation is not None and self.continuation.answer.continuing:
                        await self._continue(client, self.continuation)
                return
        except ClientDisconnected:  # nobody is left to answer; any other OSError is a failure to answer for
            raise
        except Refused as refused:
            refusal = refused.refusal
        except Exception:
            log.exception("unexpected error in the upstream call to pool %s", self.pool.name)
            refusal = InternalError()
        await self._refuse(client, refusal)

    async def _continue(self, client: ClientAnswer, continuation: Continuation) -> None:
        """The short leg was cut: give back its slot and replica, enter the long pool (or its overflow) with
        the continuation, and relay the long leg into the same answer; raises the refusal that stops it."""
        self._leave()
        self.worked = True
        answer = continuation.answer
        answer.long_leg()
        self.pool, self.out = continuation.long, continuation.leg(continuation.long, answer)
        self.replan = lambda pool: (self._leg_for(continuation, pool), None)
        self.record.pool = self.pool.name
        refusal = await self._enter_or_overflow()
        if refusal is not None:
            raise Refused(refusal)
        assert self.outcome.replica is not None and self.exchanged is not None  # a pool continued in picks replicas
        exchange = Exchange(self.exchanged, self.outcome.replica, self.out, self.outcome, self.record, client, None)
        await exchange.run()
        self.record.metrics.continued(self.pool.name, self.tenant, answer.seam_gap, answer.prefilled)

    @staticmethod
    def _leg_for(continuation: Continuation, pool: Pool) -> Outgoing:
        """The long leg planned for ``pool``, the long pool's overflow; raises where that pool cannot continue an
        answer (kind litellm), so the long pool's shed stands."""
        if not pool.continues_answers:
            raise Refused(Rejection(503, f"Pool '{pool.name}' cannot continue an answer.", code="cannot_continue"))
        return continuation.leg(pool, continuation.answer)

    def _leave(self) -> None:
        """Give back the replica and the slot a leg held."""
        if self.outcome.replica is not None:
            self.outcome.replica.release()
            self.outcome.replica = None
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    async def _enter_or_overflow(self) -> Shed | None:
        """Enter the pool; if it sheds the request, enter its overflow pool instead (once), with the call
        planned for that pool. The shed stands where the overflow pool's caps refuse the request: the pool
        it was sent to may take it in a moment, and a client retries a 503, not a 400."""
        for attempt in range(2):
            try:
                await self._enter()
                return None
            except Refused as refused:
                refusal = refused.refusal
                if not isinstance(refusal, Shed):
                    raise
                overflow = self.pool.overflow
                if attempt or overflow is None or (self.client is not None and self.client.started):
                    return refusal
                try:
                    out, answer = self.replan(overflow) if self.replan is not None else (self.out, self.answer)
                except Refused:
                    return refusal
                self.answer = answer
                self._overflow(overflow, refusal, out)
        raise AssertionError("unreachable: the second attempt returns")

    def _overflow(self, overflow: Pool, shed: Shed, out: Outgoing) -> None:
        """Send the request to the pool ``overflow`` instead, as ``out`` (planned for it), and say so in
        its headers."""
        self.record.metrics.shed(self.pool.name, f"{shed.reason}_overflowed")
        out.headers.overflowed(self.pool.name, overflow.name)
        self.out = out
        self.pool = overflow
        if self.merged_in is not None:
            self._count_merged_in(overflow)
        self.record.pool = overflow.name
        self.record.metrics.pool_chosen(overflow.name, "overflow")

    def _count_merged_in(self, pool: Pool | None) -> None:
        """Count the call among the merge's requests in ``pool`` (None: in none), no longer in the pool it was."""
        if self.merged_in is not None:
            self.merged_in.merged_in_flight -= 1
        self.merged_in = pool
        if pool is not None:
            pool.merged_in_flight += 1

    async def _enter(self) -> None:
        """Take a slot of the pool (waiting fairly for one) and a replica, where the pool picks one; raises
        the ``Shed`` refusal."""
        pool = self.pool
        if pool.gate is not None:
            queued = perf_counter()
            try:
                await pool.gate.acquire(self.tenant)
            finally:
                self.record.metrics.observe_queue_wait(pool.name, perf_counter() - queued)
            self.slot = pool.gate
        try:
            picked = pool.pick(self.out.placement)
        except Refused:
            if self.slot is not None:
                self.slot.release()
                self.slot = None
            raise
        if picked is None:  # the pool answers the request itself (``relay``)
            return
        if self.taken_at is None:
            self.taken_at = perf_counter()
        picked.replica.take()
        self.outcome.replica, self.exchanged = picked.replica, picked.pool
        self.record.metrics.replica_chosen(pool.name, picked.replica.base_url, picked.reason)
        if picked.held_tokens is not None:
            self.record.metrics.held_at_choice(pool.name, picked.held_tokens)

    async def _relay(self, client: ClientAnswer) -> None:
        """The pool answers itself (``Pool.relay``): its whole answer, or its stream's events as they come; a
        failure raises its refusal, which ``_refuse`` answers in the form still open to the client."""
        self.worked = True  # the provider may be working on it: admission's hold is settled, not given back
        relayed = await self.pool.relay(self.out.body, stream=self.out.stream)
        if relayed.stream is None:
            self.outcome.usage = relayed.usage
            await client.whole(200, JSON, relayed.body)
            return
        await client.open_stream()
        try:
            async for event in relayed.stream:
                await client.event(event)
        finally:
            self.outcome.usage = relayed.stream.usage
        await client.end(b"data: [DONE]\n\n")

    async def _refuse(self, client: ClientAnswer, refusal: Refusal) -> None:
        """The call refused or failed: the passages answer where the tenant has one, no replica is healthy and
        nothing went out; else the refusal as the client's answer can still take it (``ClientAnswer.fail``)."""
        if client.finished:
            return  # the answer went out whole before it failed (closing the upstream's reply): nothing to add
        error = client.errors.error(refusal)
        if isinstance(refusal, Shed):
            self.record.metrics.shed(self.pool.name, refusal.reason)
        else:
            self.record.note(error=error.code or error.type, param=error.param)
        if not client.started and self.out.fallback is not None and isinstance(refusal, Shed) \
                and refusal.reason == "no_healthy_upstream":
            await answer_with_passages(client, self.out, self.out.fallback, "no_healthy_upstream")
        else:
            await client.fail(refusal)
