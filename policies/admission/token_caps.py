"""Output and input token caps: what a request may ask of the engine before it is admitted.

max_tokens bounds how long a request can hold a batch slot, so a tenant (or a pool meant for short
answers) sets a ceiling: above it the request is clamped to it (the default; the client gets a
shorter answer with finish_reason "length") or refused with a 400 that names the limit. A request
that names no max_tokens gets the default, so no request runs to the model's context length by
accident. The prompt's own size is capped too: a 400 before it reaches the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from policies.request.types import Rejection

OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens")  # chat's newer name first; vLLM reads both
RESPONSES_OUTPUT_FIELDS = ("max_output_tokens",)  # the only one vLLM's Responses API reads


@dataclass(frozen=True, slots=True)
class TokenCaps:
    max_tokens: int | None = None
    action: Literal["clamp", "reject"] = "clamp"
    default_max_tokens: int | None = None
    max_input_tokens: int | None = None
    source: str = "limits"  # where the limits come from, for the messages: "limits", "pool 'short'"


def requested_output(body: dict[str, Any]) -> tuple[str, int | None]:
    """(field, value) of the output cap a request names; (the endpoint's field, None) when it names
    none. Only the fields its API reads count: a Responses body's (its prompt is ``input``) is
    ``max_output_tokens``, and a chat field in it, which the engine ignores, must not stand in for it."""
    fields = _output_fields(body)
    for field in fields:
        value = body.get(field)
        if value is not None:
            return field, value
    return fields[-1], None


def _output_fields(body: dict[str, Any]) -> tuple[str, ...]:
    return RESPONSES_OUTPUT_FIELDS if "input" in body else OUTPUT_FIELDS


def cap_output(body: dict[str, Any], caps: TokenCaps) -> dict[str, Any] | Rejection:
    """The body with its max_tokens defaulted or clamped (the same object when nothing changes)."""
    field, requested = requested_output(body)
    if requested is None:
        default = caps.default_max_tokens
        if default is None:
            return body
        if caps.max_tokens is not None:
            default = min(default, caps.max_tokens)
        return {**body, field: default}
    if caps.max_tokens is None or requested <= caps.max_tokens:
        return body
    if caps.action == "reject":
        return Rejection(400, f"{field} is {requested}, above the limit of {caps.max_tokens} output tokens "
                              f"({caps.source}.max_tokens).", param=field, code="max_tokens_above_limit")
    capped = {**body, field: caps.max_tokens}
    for other in _output_fields(body):  # a second, larger field would undo the clamp upstream
        if other != field and isinstance(capped.get(other), int) and capped[other] > caps.max_tokens:
            capped[other] = caps.max_tokens
    return capped


def check_prompt_tokens(prompt_tokens: int, caps: TokenCaps, param: str) -> Rejection | None:
    if caps.max_input_tokens is None or prompt_tokens <= caps.max_input_tokens:
        return None
    return Rejection(400, f"The prompt is {prompt_tokens} tokens, above the limit of {caps.max_input_tokens} "
                          f"input tokens ({caps.source}.max_input_tokens).", param=param,
                     code="input_tokens_above_limit")
