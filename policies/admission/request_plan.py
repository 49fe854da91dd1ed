"""What the gateway does to a request's body and call once its pool is known: one plan, decided here.

``plan_call`` takes the validated request, the tenant's salt rule and what the pool and tenant
settings say, and returns a ``CallPlan``: the max_tokens caps to apply, the output that fits the pool's
context after the prompt (``context_fit``), the cache_salt to send (or
the client's to drop), whether to ask the engine for a stream's usage (and hide it from a client
that did not ask), whether the answer cache applies, whether to name the pool in a header.
``shape_body`` then applies the plan to the body: a body nothing else changed is not parsed and
re-serialized, only extended in place (``with_field``), which keeps the common request cheap.

Whether to retrieve context is decided before this plan (the tenant has a collection, and the
request did not send ``x-prefixgate-retrieval: off``): retrieval changes the prompt that admission
counts and the length prediction reads, and the prediction picks the pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from policies.admission.context_fit import fit_output
from policies.admission.token_caps import TokenCaps, cap_output
from policies.answers.answer_cache import cacheable
from policies.prompt.cache_salt import SaltPolicy
from policies.refusals import Rejection
from policies.request.types import RequestView

USAGE_OPTION = b'{"include_usage":true}'


@dataclass(slots=True)
class CallPlan:
    caps: TokenCaps | None  # the pool's max_tokens limits, with the tenant's action; None: it sets none
    salt: str | None  # the cache_salt to send; None: send none (and drop the client's, if it sent one)
    ask_usage: bool  # add stream_options.include_usage and hide the usage event the client did not ask for
    answer_cache: bool  # the tenant stores answers: look this one up and store it, if the body qualifies
    announce_pool: bool  # say which pool took it (x-prefixgate-pool)
    priority: int | None = None  # vLLM's priority to send (the predicted output tokens), unless the client sent one
    output_fields: tuple[str, ...] = ()  # the fields that cap the answer, as its endpoint reads them
    room: int | None = None  # the most output the pool's context holds after the prompt; None: not known


@dataclass(slots=True)
class ShapedBody:
    raw: bytes  # what goes upstream
    body: dict[str, Any]  # the same, parsed: what admission charges and the answer cache keys on
    capped: bool  # the caps changed max_tokens
    answer_cache: bool  # the plan wants the answer cache and this body qualifies (deterministic)
    clamped: int | None = None  # the output cap lowered to what fits the pool's context (``fit_output``)


def plan_call(view: RequestView, body: dict[str, Any], *, salt: SaltPolicy, caps: TokenCaps | None,
              engine_usage: bool, answers: bool, announce_pool: bool, priority: int | None = None,
              room: int | None = None) -> CallPlan:
    """The plan for a generating request. ``engine_usage``: the pool's engines report a
    stream's usage only when asked (vLLM; a litellm pool counts its own); ``answers``: the tenant
    stores answers and the gateway has a store; ``priority``: the pool sends priority hints, this one;
    ``room``: the output that fits the pool's context after the prompt (``output_room``), where known."""
    return CallPlan(
        caps=caps,
        salt=salt.upstream_salt(body.get("cache_salt")),
        ask_usage=view.stream and not view.include_usage and engine_usage,
        answer_cache=answers,
        announce_pool=announce_pool,
        priority=priority if "priority" not in body else None,
        output_fields=view.output_fields,
        room=room,
    )


def shape_body(raw: bytes, body: dict[str, Any], changed: bool, plan: CallPlan) -> ShapedBody | Rejection:
    """The body to send: ``body`` (``raw`` as received, ``changed`` when rewriting, retrieval or
    admission made a new one) with the plan applied; or the refusal of the pool's caps. The cap that fits the
    context comes last, so it lowers a default the caps gave too."""
    capped, clamped = False, None
    if plan.caps is not None:
        shaped = cap_output(body, plan.caps, plan.output_fields)
        if not isinstance(shaped, dict):
            return shaped
        capped = shaped is not body
        body, changed = shaped, changed or capped
    fitted = fit_output(body, plan.output_fields, plan.room) if plan.room is not None else None
    if fitted is not None:
        (body, clamped), changed = fitted, True
    if plan.salt is None:
        if "cache_salt" in body:  # salts off: the engine is not told a client's salt either
            body, changed = {k: v for k, v in body.items() if k != "cache_salt"}, True
    elif changed or "cache_salt" in body:
        body, changed = {**body, "cache_salt": plan.salt}, True
    else:
        raw = with_field(raw, b"cache_salt", orjson.dumps(plan.salt))
    if plan.ask_usage:  # count tokens from the engine's usage, not from events (``hide_usage_events``)
        if changed or "stream_options" in body:
            options = {**(body.get("stream_options") or {}), "include_usage": True}
            body, changed = {**body, "stream_options": options}, True
        else:
            raw = with_field(raw, b"stream_options", USAGE_OPTION)
    if plan.priority is not None:  # the parsed body gains it too: the answer cache keys on it
        body = {**body, "priority": plan.priority}
        if not changed:
            raw = with_field(raw, b"priority", str(plan.priority).encode())
    if changed:
        raw = orjson.dumps(body)
    return ShapedBody(raw, body, capped, plan.answer_cache and cacheable(body), clamped)


def with_field(raw: bytes, name: bytes, value: bytes) -> bytes:
    """Add a new top-level field (``value``: JSON) to a JSON object's bytes without parsing and
    re-serializing it.

    Only for a body already decoded as an object that lacks ``name``: its last non-blank byte is
    the closing brace, and an object here is never empty (model and messages are required).
    """
    return raw.rstrip()[:-1] + b',"' + name + b'":' + value + b"}"
