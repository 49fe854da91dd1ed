"""The generation routes (chat completions, completions, embeddings) as bare ASGI apps.

These routes carry nearly all of a gateway's traffic, so they skip Starlette's Request object,
router and middleware wrappers: in the overhead benchmark those cost about a fifth of the CPU of
each request and a wrapper call on every streamed chunk (``FastPath`` hands them their requests).

A request goes through named steps, each a method of ``Preparation``, top to bottom:
authenticate, read, shape the prompt (rewrite, retrieval), admit, choose the pool, plan and shape
the call (``plan_call``, ``shape_body``), charge the rate limits, answer from the answer cache or
hand over to the ``UpstreamCall``. A step that refuses raises ``Refused``; the route answers it.
"""

from __future__ import annotations

import logging
from functools import partial
from time import perf_counter

from starlette.types import Receive, Scope, Send

from policies.admission.refusals import InternalError, Refused
from policies.admission.request_plan import ShapedBody, plan_call, shape_body
from policies.answers.answer_cache import answer_key
from policies.prompt.prompt import rewrite_chat
from policies.prompt.stable_prefix import chat_pieces, completion_pieces
from policies.request.types import Endpoint, Rejection, RequestView
from policies.routing.continuation import continuable
from proxy.admission.request_admission import AdmissionHold, Admitted
from proxy.auth.tenants import TenantPolicy
from proxy.caches.answers import AnswerToStore, send_stored_answer
from proxy.calls.call import UpstreamCall
from proxy.calls.continued_answer import ContinuedAnswer
from proxy.calls.outgoing import CLIENT_CLOSED, Outgoing
from proxy.gateway import Gateway
from proxy.http.body import ClientGone, checked_request, read_body
from proxy.http.continuation_steps import long_leg_out, starts_short
from proxy.http.prompt import Planned, Prompt
from proxy.http.responses_steps import check_pool, recall, responses_answer, shape_responses
from proxy.observability.request_record import RequestRecord
from proxy.retrieval.context import add_context
from proxy.upstream.pool import Pool
from proxy.wire.errors import openai_error
from proxy.wire.headers import RequestHeaders, ResponseHeaders

log = logging.getLogger("prefixgate")

class GenerationRoute:
    """POST /v1/{chat/completions,completions,embeddings,responses}: one upstream call per request."""

    __slots__ = ("endpoint", "upstream_path")

    def __init__(self, endpoint: Endpoint, upstream_path: str) -> None:
        self.endpoint = endpoint
        self.upstream_path = upstream_path  # appended to the replica's base URL (…/v1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway: Gateway = scope["state"]["gateway"]
        record = RequestRecord(gateway.metrics, gateway.access_log, self.upstream_path)
        steps = Preparation(gateway, self.endpoint, record)
        try:
            call = await steps.run(RequestHeaders.of(scope), receive, send)
        except Refused as refused:
            error = openai_error(refused.refusal)
            record.note(error=error.code or error.type, param=error.param)
            await steps.give_back()
            record.answered(error.status)
            await error.send(send)
            return
        except ClientGone:
            await steps.give_back()
            record.answered(CLIENT_CLOSED)
            return
        except Exception:
            log.exception("unexpected error handling %s", self.upstream_path)
            await steps.give_back()
            record.answered(500)
            await openai_error(InternalError()).send(send)
            return
        if call is not None:  # None: answered from the answer cache
            await call(scope, receive, send)


class Preparation:
    """One request's way from its headers to an ``UpstreamCall``; each step is one method."""

    __slots__ = ("admitted", "endpoint", "gateway", "headers", "mark", "prediction", "reason", "record")

    def __init__(self, gateway: Gateway, endpoint: Endpoint, record: RequestRecord) -> None:
        self.gateway = gateway
        self.endpoint = endpoint
        self.record = record
        self.mark = record.started  # when the current stage began
        self.admitted: Admitted | None = None  # held until the answer ends, or given back
        self.headers = ResponseHeaders()  # prefixgate's own response headers, as the steps report them
        self.reason, self.prediction = "model", None  # why the pool was chosen; admission's length prediction

    async def run(self, headers: RequestHeaders, receive: Receive, send: Send) -> UpstreamCall | None:
        tenant = self.authenticate(headers)
        view, raw = await self.read(headers, receive)
        if self.endpoint == "embeddings":
            pool = self.choose_pool(view, headers)
            return self.call(pool, view, tenant, Prompt(raw, view.body), None, None, headers)
        prompt = Prompt(raw, view.body)
        if self.endpoint == "responses":
            await recall(self.gateway, prompt, tenant)
        await self.shape_prompt(prompt, tenant, headers)
        self.admit(prompt, tenant)
        pool = self.choose_pool(view, headers)
        if self.endpoint == "responses":
            check_pool(pool)
        planned = self.plan(view, prompt, tenant, pool, headers)
        plan, shaped = planned
        if self.admitted is not None or plan.announce_pool:
            await self.charge(shaped, tenant, pool, announce=plan.announce_pool)
        answer = self.answer_slot(shaped, tenant)
        if answer is not None and await self.replay(answer, view, send):
            return None
        return self.call(pool, view, tenant, prompt, planned, answer, headers)

    def authenticate(self, headers: RequestHeaders) -> TenantPolicy:
        gateway = self.gateway
        tenant = gateway.tenants[gateway.keys.tenant_for(headers.authorization)]
        self.record.tenant(tenant.name)
        self.mark = self.record.stage("auth", self.mark)
        return tenant

    async def read(self, headers: RequestHeaders, receive: Receive) -> tuple[RequestView, bytes]:
        """The body within the size cap, decoded once, within the input limits, validated."""
        raw = await read_body(receive, headers.length, self.gateway.config.server.max_body_bytes)
        view = checked_request(self.endpoint, raw, self.gateway.input_limits)
        record = self.record
        self.mark = record.stage("request", self.mark)
        if record.entry is not None:
            record.note(model=view.model, stream=view.stream)
        return view, raw

    async def shape_prompt(self, prompt: Prompt, tenant: TenantPolicy, headers: RequestHeaders) -> None:
        """Chat: the canonical prompt (volatile content moved to the end), then the tenant's passages;
        the Responses API the same over this turn's input (``shape_responses``)."""
        gateway = self.gateway
        if self.endpoint == "responses":
            moved = await shape_responses(gateway, prompt, tenant, headers, self.headers, self.record, self.mark)
            assert prompt.pieces is not None
            gateway.prefix_meter.observe(tenant.name, prompt.pieces, moved)
            return
        if self.endpoint != "chat":
            prompt.pieces = completion_pieces(prompt.body)
            gateway.prefix_meter.observe(tenant.name, prompt.pieces, 0)
            return
        rewrite = rewrite_chat(prompt.received, tenant.prompt)
        prompt.canonical = rewrite.body if rewrite.changed else None
        self.record.stage("canonicalize", self.mark)
        if self.record.entry is not None:
            self.record.note(relocated=rewrite.moved)
        self.headers.prompt_rewrite(rewrite.detected, rewrite.moved, rewrite.templated)
        settings = tenant.retrieval
        if settings is not None and headers.retrieval and gateway.retriever is not None:
            retrieved, evidence = await add_context(gateway.retriever, tenant.name, settings, prompt.body,
                                                    self.headers, self.record)
            if evidence is not None:
                prompt.retrieved = retrieved
            if settings.fallback:
                prompt.fallback = evidence
        prompt.pieces = chat_pieces(prompt.body)
        gateway.prefix_meter.observe(tenant.name, prompt.pieces, rewrite.moved)

    def admit(self, prompt: Prompt, tenant: TenantPolicy) -> None:
        """Input and output caps, the length prediction; the rate limits are charged once the pool's
        caps are known (``charge``)."""
        admission = self.gateway.admission
        if not admission.needed(tenant.admission):
            return
        assert prompt.pieces is not None  # chat and completions render their prompt first
        self.mark = perf_counter()
        self.admitted = admission.prepare(tenant.admission, prompt.body, prompt.pieces, tenant.name,
                                          self.endpoint)
        prompt.admitted = self.admitted.body if self.admitted.capped else None
        self.admitted.may_cut = self.gateway.upstreams.continues and continuable(prompt.body, self.endpoint)

    def choose_pool(self, view: RequestView, headers: RequestHeaders) -> Pool:
        """The pool by name, by the predicted output length (or to start short: ``choose_pool``), by model."""
        self.prediction = prediction = self.admitted.prediction if self.admitted is not None else None
        pool, reason = self.gateway.upstreams.pool_for(
            view.model, embeddings=self.endpoint == "embeddings", named=headers.pool,
            predicted_p90=prediction.p90 if prediction is not None else None,
            short_share=prediction.short_share if prediction is not None else None,
            continuable=prediction is not None and self.admitted.may_cut)  # type: ignore[union-attr]
        self.reason, self.record.pool = reason, pool.name
        self.gateway.metrics.pool_chosen(pool.name, reason)
        return pool

    def plan(self, view: RequestView, prompt: Prompt, tenant: TenantPolicy, pool: Pool,
             headers: RequestHeaders) -> Planned:
        """The call as ``pool`` takes it (its caps, the cache salt, whether its engines are asked for a
        stream's usage: ``plan_call``) and the body it gets (``shape_body``); raises its caps' refusal."""
        gateway, chat_like = self.gateway, self.endpoint != "responses"  # a Responses answer carries its usage
        plan = plan_call(view, prompt.body, salt=tenant.salt, caps=pool.caps(tenant.admission.caps.action),
                         engine_usage=chat_like and not pool.counts_usage_itself,
                         answers=chat_like and tenant.answer_ttl is not None and gateway.answers is not None,
                         announce_pool=gateway.upstreams.routes_by_length or headers.pool is not None,
                         priority=self.prediction.p50 if pool.priority_hints and self.prediction else None)
        shaped = shape_body(prompt.raw, prompt.body, prompt.changed, plan)
        if isinstance(shaped, Rejection):
            raise Refused(shaped)
        return Planned(plan, shaped)

    async def charge(self, shaped: ShapedBody, tenant: TenantPolicy, pool: Pool, *, announce: bool) -> None:
        """The tenant's rate limits, for the body as it will be sent (its max_tokens bounds the
        reservation)."""
        if self.admitted is not None:
            await self.gateway.admission.charge(tenant.name, tenant.admission, self.admitted, shaped.body,
                                                self.headers)
            self.record.stage("admission", self.mark)
        if announce:
            self.headers.pool(pool.name)

    def answer_slot(self, shaped: ShapedBody, tenant: TenantPolicy) -> AnswerToStore | None:
        """Where this answer is stored for exact repeats: for tenants that store answers, and bodies
        that qualify (``cacheable``)."""
        answers = self.gateway.answers
        if not shaped.answer_cache or answers is None or tenant.answer_ttl is None:
            return None
        return AnswerToStore(answers, answer_key(tenant.name, shaped.body), tenant.answer_ttl)

    async def replay(self, answer: AnswerToStore, view: RequestView, send: Send) -> bool:
        """Answer an exact repeat from the answer cache; False (a miss, said in a header) otherwise."""
        stored = await answer.store.get(answer.key)
        if stored is None:
            self.headers.answer_cache(hit=False)
            self.record.note(answer_cache="miss")
            return False
        await self.give_back()  # the engine did no work
        await send_stored_answer(send, stored, stream=view.stream, include_usage=view.include_usage,
                                 headers=self.headers)
        self.record.note(answer_cache="hit")
        self.record.answered(200)
        return True

    def call(self, pool: Pool, view: RequestView, tenant: TenantPolicy, prompt: Prompt, planned: Planned | None,
             answer: AnswerToStore | None, headers: RequestHeaders) -> UpstreamCall:
        """Hand the request over to the ``UpstreamCall``, with admission's hold, and, where the pool has
        one to overflow to, the way to plan it again for that pool (``replan``)."""
        out = self.outgoing(pool, view, tenant, prompt, planned)
        replan = None
        if planned is not None and pool.overflow is not None:  # embeddings' calls are the same in any pool
            replan = partial(self.replan, view, tenant, prompt, headers)
        continuation = starts_short(self.gateway.upstreams, self.endpoint, pool, view, prompt, planned, out,
                                    partial(self.long_leg, view, tenant, prompt, headers),
                                    lambda long: long.caps(tenant.admission.caps.action)) \
            if planned is not None and self.gateway.upstreams.continues and self.reason not in ("named", "merged") \
            else None
        answer = answer if continuation is None else None  # a cut answer is not stored for exact repeats
        hold = AdmissionHold(self.gateway.admission, self.admitted) if self.admitted is not None else None
        self.admitted = None  # the call settles it from here
        return UpstreamCall(pool, out, tenant=tenant.name, record=self.record, hold=hold, answer=answer,
                            replan=replan, continuation=continuation)

    def long_leg(self, view: RequestView, tenant: TenantPolicy, prompt: Prompt, headers: RequestHeaders, pool: Pool,
                 answer: ContinuedAnswer) -> Outgoing:
        """The continuation as it goes to ``pool``: the request as planned for that pool (``plan``; raises
        its caps' refusal), with the short leg's text to continue from (``long_leg_out``)."""
        planned = self.plan(view, prompt, tenant, pool, headers)
        return long_leg_out(self.endpoint, self.record.route, pool, view, prompt, planned, answer, self.headers)

    def replan(self, view: RequestView, tenant: TenantPolicy, prompt: Prompt, headers: RequestHeaders,
               pool: Pool) -> tuple[Outgoing, AnswerToStore | None]:
        """The call planned again for the pool a shed request overflows to: the first pool's caps, usage
        flag and prompt placement are that pool's (a placement indexes its replicas), so none of them
        carries over; nor does the answer's place in the answer cache, keyed by the body as sent.
        Raises the refusal of the overflow pool's caps, or of a pool that does not serve the request's API."""
        if self.endpoint == "responses":
            check_pool(pool)
        planned = self.plan(view, prompt, tenant, pool, headers)
        answer = self.answer_slot(planned.shaped, tenant)
        return self.outgoing(pool, view, tenant, prompt, planned), answer

    def outgoing(self, pool: Pool, view: RequestView, tenant: TenantPolicy, prompt: Prompt,
                 planned: Planned | None) -> Outgoing:
        """The request as it goes to ``pool``: the body as planned for it, and the prompt's place among
        its replicas (``Pool.place``: the key on their ring, the blocks each one's engine holds)."""
        plan, raw = (planned.plan, planned.shaped.raw) if planned is not None else (None, prompt.raw)
        salt = plan.salt if plan is not None else None  # as sent: part of the prefix the engine caches
        sent = planned.shaped.body if planned is not None else prompt.body
        placement = pool.place(prompt.pieces, prompt.conversation if prompt.conversation is not None else sent,
                               view.model, salt)
        tap = None
        if self.endpoint == "responses" and planned is not None:
            tap = responses_answer(self.gateway, tenant, planned.shaped.body, prompt)
        return Outgoing(self.record.route, raw, view.stream, view.model, placement, self.headers, prompt.fallback,
                        hide_usage=plan is not None and plan.ask_usage, tap=tap)

    async def give_back(self) -> None:
        """A refused (or cache-answered) request: its admitted tokens go back; it still counts as a request."""
        await self.gateway.admission.release(self.admitted)
        self.admitted = None
