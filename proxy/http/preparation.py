"""One request's steps from its headers to an ``UpstreamCall`` (``Preparation``), the same for every API: what
differs by API is its ``Dialect``'s.

Top to bottom: authenticate, read, recall what it continues, shape the prompt (rewrite, retrieval), admit,
choose the pool (``route``), plan the call for that pool and shape its body (``plan_call``, ``shape_body``),
charge the rate limits, answer from the answer cache or hand over to the ``UpstreamCall``, with the way to
plan it again for an overflow pool and, where it starts short, the way it goes on in the long pool. A step
that refuses raises ``Refused``; the route answers it.

The admin route's explainer runs the same steps with their effects off (``effects=False``): no retrieval, no
metric, no prefix meter, no charge, no answer cache, no call; only what decides the pool and the replica.
"""

from __future__ import annotations

from functools import partial
from time import perf_counter

from starlette.types import Receive

from policies.admission.context_fit import output_room, surely_fits
from policies.admission.length import Prediction
from policies.admission.request_plan import ShapedBody, plan_call, shape_body
from policies.admission.token_caps import requested_output
from policies.answers.answer_cache import answer_key
from policies.refusals import Refused, Rejection
from policies.request.types import RequestView
from policies.routing.sessions import body_session
from proxy.admission.request_admission import AdmissionHold, Admitted
from proxy.admission.token_count import text_bytes
from proxy.auth.tenants import TenantPolicy
from proxy.caches.answers import AnswerToStore, stored_answer
from proxy.calls.call import Continuation, UpstreamCall
from proxy.calls.continued_answer import ContinuedAnswer
from proxy.calls.outgoing import Outgoing
from proxy.gateway import Gateway
from proxy.http.body import read_body
from proxy.http.continuation_steps import long_leg_out, starts_short
from proxy.http.dialect import Dialect
from proxy.http.prompt import Planned, Prompt
from proxy.observability.request_record import RequestRecord
from proxy.upstream.pool import Pool
from proxy.wire.answer import JSON, SSE, ClientAnswer
from proxy.wire.headers import RequestHeaders, ResponseHeaders


class Preparation:
    """One request's way from its headers to an ``UpstreamCall``; each step is one method."""

    __slots__ = ("admitted", "dialect", "effects", "gateway", "headers", "mark", "prediction", "prompt_tokens",
                 "reason", "record", "session")

    def __init__(self, gateway: Gateway, dialect: Dialect, record: RequestRecord, *, effects: bool = True) -> None:
        self.gateway = gateway
        self.dialect = dialect
        self.record = record
        self.effects = effects  # False: the explainer's run, which retrieves, counts and charges nothing
        self.mark = record.started  # when the current stage began
        self.admitted: Admitted | None = None  # held until the answer ends, or given back
        self.headers = ResponseHeaders()  # prefixgate's own response headers, as the steps report them
        self.reason = "model"  # why the pool was chosen
        self.prediction: Prediction | None = None  # admission's length prediction
        self.prompt_tokens: int | None = None  # the prompt counted, once: by admission, or for a pool's context
        self.session: str | None = None  # the agent session the request names: its replica (``body_session``)

    async def run(self, headers: RequestHeaders, receive: Receive, client: ClientAnswer) -> UpstreamCall | None:
        tenant = self.authenticate(headers)
        view, prompt = await self.read(headers, receive)
        pool = await self.route(view, prompt, tenant, headers)
        if not self.dialect.generates:
            return self.call(pool, view, tenant, prompt, None, None, headers)
        planned = self.plan(view, prompt, tenant, pool, headers)
        plan, shaped = planned
        if self.admitted is not None or plan.announce_pool:
            await self.charge(shaped, tenant, pool, announce=plan.announce_pool)
        answer = self.answer_slot(shaped, tenant)
        if answer is not None and await self.replay(answer, view, client):
            return None
        return self.call(pool, view, tenant, prompt, planned, answer, headers)

    def authenticate(self, headers: RequestHeaders) -> TenantPolicy:
        gateway = self.gateway
        tenant = gateway.tenants[gateway.keys.tenant_for(headers.authorization)]
        self.record.tenant(tenant.name)
        self.mark = self.record.stage("auth", self.mark)
        return tenant

    async def read(self, headers: RequestHeaders, receive: Receive) -> tuple[RequestView, Prompt]:
        """The body within the size cap, decoded once, within the input limits, validated (``Dialect.read``)."""
        raw = await read_body(receive, headers.length, self.gateway.config.server.max_body_bytes)
        view = self.dialect.read(raw, self.gateway)
        self.session = headers.session or body_session(view.body)
        record = self.record
        self.mark = record.stage("request", self.mark)
        if record.entry is not None:
            record.note(model=view.model, stream=view.stream)
        return view, Prompt(raw, view.body)

    async def route(self, view: RequestView, prompt: Prompt, tenant: TenantPolicy, headers: RequestHeaders) -> Pool:
        """The steps that decide where the request goes: what it continues, its prompt shaped, admitted (its
        caps, its output's predicted length), and the pool, one that serves its API."""
        dialect = self.dialect
        await dialect.recall(self.gateway, prompt, tenant, keep=self.effects)
        moved = await dialect.shape(self.gateway, prompt, tenant, headers.retrieval and self.effects, self.headers,
                                    self.record, self.mark)
        if prompt.pieces is not None and self.effects:
            self.gateway.prefix_meter.observe(tenant.name, prompt.pieces, moved)
        if dialect.generates:
            self.admit(prompt, tenant)
        pool = self.choose_pool(view, headers)
        dialect.check_pool(pool)
        return pool

    def admit(self, prompt: Prompt, tenant: TenantPolicy) -> None:
        """Input and output caps, the length prediction; the rate limits are charged once the pool's
        caps are known (``charge``)."""
        admission = self.gateway.admission
        if not admission.needed(tenant.admission):
            return
        assert prompt.pieces is not None  # a dialect that generates renders its prompt's pieces
        self.mark = perf_counter()
        self.admitted = admission.prepare(tenant.admission, prompt.body, prompt.pieces, tenant.name,
                                          self.dialect.endpoint, counted=self.effects)
        prompt.admitted = self.admitted.body if self.admitted.capped else None
        self.prompt_tokens = self.admitted.prompt_tokens
        self.admitted.may_cut = self.gateway.upstreams.continues and self.dialect.may_cut(prompt.body)

    def choose_pool(self, view: RequestView, headers: RequestHeaders) -> Pool:
        """The pool by name, by the predicted output length (or to start short: ``choose_pool``), by model."""
        admitted = self.admitted
        self.prediction = prediction = admitted.prediction if admitted is not None else None
        pool, reason = self.gateway.upstreams.pool_for(
            view.model, embeddings=self.dialect.embeds, named=headers.pool,
            predicted_p90=prediction.p90 if prediction is not None else None,
            short_share=prediction.short_share if prediction is not None else None,
            continuable=prediction is not None and admitted is not None and admitted.may_cut,
            decided=prediction.decided if prediction is not None else None)
        self.reason, self.record.pool = reason, pool.name
        if self.effects:
            self.gateway.metrics.pool_chosen(pool.name, reason)
        return pool

    def plan(self, view: RequestView, prompt: Prompt, tenant: TenantPolicy, pool: Pool,
             headers: RequestHeaders) -> Planned:
        """The call as ``pool`` takes it (its caps, the cache salt, whether its engines are asked for a
        stream's usage: ``plan_call``) and the body it gets (``shape_body``); raises its caps' refusal."""
        gateway, dialect = self.gateway, self.dialect
        plan = plan_call(view, prompt.body, salt=tenant.salt, caps=pool.caps(tenant.admission.caps.action),
                         engine_usage=not dialect.carries_usage and not pool.counts_usage_itself,
                         answers=dialect.answers_cached and tenant.answer_ttl is not None
                         and gateway.answers is not None,
                         announce_pool=gateway.upstreams.routes_by_length or headers.pool is not None,
                         priority=self.prediction.p50 if pool.priority_hints and self.prediction else None,
                         room=self.room(view, prompt, pool))
        shaped = shape_body(prompt.raw, prompt.body, prompt.changed, plan)
        if isinstance(shaped, Rejection):
            raise Refused(shaped)
        self.headers.output_clamped(shaped.clamped)
        if shaped.clamped is not None and self.effects:
            gateway.metrics.output_clamped(pool.name, tenant.name)
        return Planned(plan, shaped)

    def room(self, view: RequestView, prompt: Prompt, pool: Pool) -> int | None:
        """The most output that fits ``pool``'s context after the prompt (``output_room``), where the pool knows
        its context and the request's cap (its own, or the pool's default) may not fit it; the prompt is counted
        once (admission's count, where it made one)."""
        length = pool.context_length(view.model)
        if length is None or prompt.pieces is None:
            return None
        asked = requested_output(prompt.body, view.output_fields)[1]
        cap = asked if asked is not None else pool.max_tokens_default
        if cap is None or surely_fits(cap, text_bytes(prompt.pieces), length):
            return None
        counter = self.gateway.admission.counter
        if self.prompt_tokens is None:
            self.prompt_tokens = counter.count(prompt.pieces)
        return output_room(length, self.prompt_tokens, counter.exact)

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

    async def replay(self, answer: AnswerToStore, view: RequestView, client: ClientAnswer) -> bool:
        """Answer an exact repeat from the answer cache; False (a miss, said in a header) otherwise."""
        stored = await answer.store.get(answer.key)
        if stored is None:
            self.headers.answer_cache(hit=False)
            self.record.note(answer_cache="miss")
            return False
        await self.give_back()  # the engine did no work
        self.headers.answer_cache(hit=True)
        await client.whole(200, SSE if view.stream else JSON,
                           stored_answer(stored, stream=view.stream, include_usage=view.include_usage))
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
        continuation = self.continuation(pool, view, tenant, prompt, planned, out, headers)
        answer = answer if continuation is None else None  # a cut answer is not stored for exact repeats
        hold = AdmissionHold(self.gateway.admission, self.admitted) if self.admitted is not None else None
        self.admitted = None  # the call settles it from here
        return UpstreamCall(pool, out, tenant=tenant.name, record=self.record, hold=hold, answer=answer,
                            replan=replan, continuation=continuation, merged=self.reason == "merged")

    def continuation(self, pool: Pool, view: RequestView, tenant: TenantPolicy, prompt: Prompt,
                     planned: Planned | None, out: Outgoing, headers: RequestHeaders) -> Continuation | None:
        """Where the answer goes on if ``pool``'s engine cuts it (``starts_short``, which makes ``out`` the short
        leg); None where it does not start short, where the client named the pool, or where its template's own
        history placed it: a template whose answers all end well within the cut is sent as the client asked."""
        if planned is None or not self.gateway.upstreams.continues or self.reason in ("named", "merged", "history"):
            return None
        return starts_short(self.gateway.upstreams, self.dialect.endpoint, pool, view, prompt, planned, out,
                            partial(self.long_leg, view, tenant, prompt, headers),
                            lambda long: long.caps(tenant.admission.caps.action))

    def long_leg(self, view: RequestView, tenant: TenantPolicy, prompt: Prompt, headers: RequestHeaders, pool: Pool,
                 answer: ContinuedAnswer) -> Outgoing:
        """The continuation as it goes to ``pool``: the request as planned for that pool (``plan``; raises
        its caps' refusal), with the short leg's text to continue from (``long_leg_out``)."""
        planned = self.plan(view, prompt, tenant, pool, headers)
        return long_leg_out(self.dialect.endpoint, self.record.route, pool, view, prompt, planned, answer,
                            self.headers)

    def replan(self, view: RequestView, tenant: TenantPolicy, prompt: Prompt, headers: RequestHeaders,
               pool: Pool) -> tuple[Outgoing, AnswerToStore | None]:
        """The call planned again for the pool a shed request overflows to: the first pool's caps, usage
        flag and prompt placement are that pool's (a placement indexes its replicas), so none of them
        carries over; nor does the answer's place in the answer cache, keyed by the body as sent.
        Raises the refusal of the overflow pool's caps, or of a pool that does not serve the request's API."""
        self.dialect.check_pool(pool)
        planned = self.plan(view, prompt, tenant, pool, headers)
        answer = self.answer_slot(planned.shaped, tenant)
        return self.outgoing(pool, view, tenant, prompt, planned), answer

    def outgoing(self, pool: Pool, view: RequestView, tenant: TenantPolicy, prompt: Prompt,
                 planned: Planned | None) -> Outgoing:
        """The request as it goes to ``pool``: the body as planned for it, and the prompt's place among
        its replicas (``Pool.place``: the key on their ring, the blocks each one's engine holds)."""
        if planned is None:
            placement = pool.place(prompt.pieces, prompt.body, view.model, None, self.session)
            return Outgoing(self.record.route, prompt.raw, view.stream, view.model, placement, self.headers,
                            prompt.fallback)
        plan, sent = planned.plan, planned.shaped.body
        placement = pool.place(prompt.pieces, self.dialect.placed(prompt, sent), view.model, plan.salt, self.session)
        return Outgoing(self.record.route, planned.shaped.raw, view.stream, view.model, placement, self.headers,
                        prompt.fallback, hide_usage=plan.ask_usage,
                        tap=self.dialect.tap(self.gateway, tenant, sent, prompt))

    async def give_back(self) -> None:
        """A refused (or cache-answered) request: its admitted tokens go back; it still counts as a request."""
        await self.gateway.admission.release(self.admitted)
        self.admitted = None
