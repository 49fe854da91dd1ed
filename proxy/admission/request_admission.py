"""Admission of one request: token caps, output-length prediction, the tenant's rate limits.

Runs once the prompt is final (rewritten, with any retrieved context), since that is what the
engine will process. The work is only done where configured: with no limits and no short pools a
request costs one attribute check here. What was reserved is settled when the answer ends, with
the usage the upstream reported.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from policies.admission.length import LengthHistory, Prediction, Step, features_of, length_key, predict, step_of
from policies.admission.limits import RateLimits, limit_states, output_reservation, rate_limited
from policies.admission.token_caps import TokenCaps, cap_output, check_prompt_tokens, requested_output
from policies.prompt.stable_prefix import Pieces
from policies.refusals import LimiterDown, Refused
from policies.request.types import OUTPUT_FIELDS, PROMPT_FIELDS, Endpoint
from proxy.admission.rate_limiter import Limiter, LimiterUnavailable, Ticket
from proxy.admission.token_count import TokenCounter
from proxy.observability.metrics import Metrics
from proxy.wire.headers import ResponseHeaders

LengthObserver = Callable[[str, int, int, bool], None]  # (model, predicted p90, completion tokens, may be cut)
MAX_HISTORIES = 10_000  # (tenant, template) keys remembered, least recently used dropped first


@dataclass(frozen=True, slots=True)
class TenantAdmission:
    """A tenant's admission settings, decided at start-up."""

    limits: RateLimits
    caps: TokenCaps
    output_reservation: int

    @property
    def active(self) -> bool:
        caps = self.caps
        return self.limits.active or caps.max_tokens is not None or caps.default_max_tokens is not None or (
            caps.max_input_tokens is not None)


@dataclass(slots=True)
class Admitted:
    """What admission decided for a request, and what to settle when its answer ends."""

    body: dict[str, Any]  # as admitted: within the tenant's caps
    capped: bool  # admission made a new body (``cap_output``)
    prompt_tokens: int
    prediction: Prediction | None = None
    ticket: Ticket | None = None
    reserved: int = 0
    length_key: int | None = None
    tenant: str = ""
    step: Step = "turn"
    may_cut: bool = False  # its answer may be cut in a short pool and continued (``continuable``)
    output_fields: tuple[str, ...] = ()  # the fields that cap its answer, as its endpoint reads them


class LengthBook:
    """Length histories per (tenant, template), the least recently used dropped past a bound."""

    def __init__(self, size: int = MAX_HISTORIES) -> None:
        self.size = size
        self.histories: OrderedDict[int, LengthHistory] = OrderedDict()

    def get(self, key: int) -> LengthHistory | None:
        history = self.histories.get(key)
        if history is not None:
            self.histories.move_to_end(key)
        return history

    def observe(self, key: int, tokens: int) -> None:
        history = self.histories.get(key)
        if history is None:
            history = self.histories[key] = LengthHistory()
            if len(self.histories) > self.size:
                self.histories.popitem(last=False)
        history.observe(tokens)


class Admission:
    def __init__(self, limiter: Limiter, counter: TokenCounter, metrics: Metrics, *, predicts: bool,
                 on_length: LengthObserver | None = None, short_threshold: int | None = None,
                 decided_after: int = 0) -> None:
        self.limiter = limiter
        self.short_threshold = short_threshold  # a prediction says the share of its history within it
        self.decided_after = decided_after  # and which side of it the history has settled on, after this many
        self.on_length = on_length  # told each answer's model, predicted p90 and length
        self.counter = counter
        self.metrics = metrics
        self.predicts = predicts  # some pool is for short answers: every request gets a prediction
        self.book = LengthBook()

    def needed(self, tenant: TenantAdmission) -> bool:
        return self.predicts or tenant.active

    def prepare(self, tenant: TenantAdmission, body: dict[str, Any], pieces: Pieces, tenant_name: str,
                endpoint: Endpoint, *, counted: bool = True) -> Admitted:
        """Count the prompt, cap it and the output, predict the output; raises the ``Rejection`` that refuses it.
        ``counted``: False for a request only explained (the admin route): a clamp is not counted."""
        prompt_tokens = self.counter.count(pieces)
        refused = check_prompt_tokens(prompt_tokens, tenant.caps, PROMPT_FIELDS[endpoint])
        if refused is not None:
            raise Refused(refused)
        fields = OUTPUT_FIELDS[endpoint]
        capped = cap_output(body, tenant.caps, fields)
        if not isinstance(capped, dict):
            raise Refused(capped)
        if capped is not body and counted:
            self.metrics.admission_clamped(tenant_name)
        admitted = Admitted(capped, capped is not body, prompt_tokens, output_fields=fields)
        if self.predicts or tenant.limits.tokens_per_minute is not None:
            admitted.tenant = tenant_name
            admitted.length_key, admitted.step, admitted.prediction = self.predict(body, pieces, tenant_name,
                                                                                   endpoint)
        return admitted

    def predict(self, body: dict[str, Any], pieces: Pieces, tenant_name: str,
                endpoint: Endpoint) -> tuple[int, Step, Prediction]:
        """The output length predicted for ``body`` (as capped) from its template's history: the
        history's key, the request's step, the prediction. Reads the book, changes nothing."""
        features = features_of(body, requested_output(body, OUTPUT_FIELDS[endpoint])[1])
        chat = endpoint != "completions"  # a Responses conversation is a chat
        key = length_key(pieces, chat, tenant_name, str(body.get("model", "")), features.json_answer)
        prediction = predict(features, self.book.get(key), self.short_threshold, self.decided_after)
        return key, step_of(pieces, chat), prediction

    async def charge(self, tenant_name: str, tenant: TenantAdmission, admitted: Admitted, body: dict[str, Any],
                     headers: ResponseHeaders) -> None:
        """Count the request against the tenant's rate limits (``body`` as it will be sent: its
        max_tokens bounds the reservation); raises the ``RateLimited`` or ``LimiterDown`` refusal."""
        limits = tenant.limits
        if not limits.active:
            return
        p95 = admitted.prediction.p95 if admitted.prediction is not None else None
        output = output_reservation(requested_output(body, admitted.output_fields)[1], p95,
                                    tenant.output_reservation)
        reserved = admitted.prompt_tokens + output
        try:
            verdict, ticket = await self.limiter.admit(tenant_name, limits, reserved)
        except LimiterUnavailable as down:
            raise Refused(LimiterDown(down.retry_after)) from None
        if not verdict.admitted:
            refusal = rate_limited(limits, verdict, reserved)
            self.metrics.rate_limited(tenant_name, "too_large" if refusal.too_large else refusal.refusing.unit)
            raise Refused(refusal)
        headers.rate_limits(limit_states(limits, verdict))
        admitted.ticket, admitted.reserved = ticket, reserved

    async def finish(self, admitted: Admitted, pool: str, prompt_tokens: int | None,
                     completion_tokens: int | None) -> None:
        """The answer ended: learn its length, compare it with the prediction, settle the reservation."""
        if completion_tokens is not None and admitted.length_key is not None:
            self.book.observe(admitted.length_key, completion_tokens)
            if admitted.prediction is not None:
                self.metrics.observe_length(pool, admitted.tenant, admitted.step, admitted.prediction.p90,
                                            completion_tokens)
                if self.on_length is not None:
                    self.on_length(str(admitted.body.get("model", "")), admitted.prediction.p90, completion_tokens,
                                   admitted.may_cut)
        if admitted.ticket is not None:
            used = (prompt_tokens if prompt_tokens is not None else admitted.prompt_tokens) + (completion_tokens or 0)
            await self.limiter.settle(admitted.ticket, used)

    async def release(self, admitted: Admitted | None) -> None:
        """No engine work was done for an admitted request (refused later, answered from the answer
        cache, its client gone): it still counts as a request, its tokens go back."""
        if admitted is not None and admitted.ticket is not None:
            await self.limiter.settle(admitted.ticket, 0)

    async def aclose(self) -> None:
        await self.limiter.aclose()


@dataclass(frozen=True, slots=True)
class AdmissionHold:
    """What admission holds for a request until its answer ends: settled with the answer's usage, or
    given back whole when no engine worked on it."""

    admission: Admission
    admitted: Admitted

    async def settle(self, pool: str, usage: tuple[int | None, int | None]) -> None:
        await self.admission.finish(self.admitted, pool, *usage)

    async def give_back(self) -> None:
        await self.admission.release(self.admitted)
