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

from policies.refusals import Rejection

CapAction = Literal["clamp", "reject"]  # what a cap does to a request over it


@dataclass(frozen=True, slots=True)
class TokenCaps:
    max_tokens: int | None = None
    action: CapAction = "clamp"
    default_max_tokens: int | None = None
    max_input_tokens: int | None = None
    source: str = "limits"  # where the limits come from, for the messages: "limits", "pool 'short'"


def requested_output(body: dict[str, Any], fields: tuple[str, ...]) -> tuple[str, int | None]:
    """(field, value) of the output cap a request names; (the endpoint's field, None) when it names
    none. ``fields`` are its endpoint's (``OUTPUT_FIELDS``): only those its engine reads count, so a
    field of another API in the body (chat's ``max_tokens`` in a Responses body, ``max_output_tokens``
    in a chat body) never stands in for the one the engine obeys."""
    for field in fields:
        value = body.get(field)
        if value is not None:
            return field, value
    return fields[-1], None


def cap_output(body: dict[str, Any], caps: TokenCaps, fields: tuple[str, ...]) -> dict[str, Any] | Rejection:
    """The body with its output cap (one of its endpoint's ``fields``) defaulted or clamped (the same
    object when nothing changes)."""
    field, requested = requested_output(body, fields)
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
    for other in fields:  # a second, larger field would undo the clamp upstream
        if other != field and isinstance(capped.get(other), int) and capped[other] > caps.max_tokens:
            capped[other] = caps.max_tokens
    return capped


def check_prompt_tokens(prompt_tokens: int, caps: TokenCaps, param: str) -> Rejection | None:
    if caps.max_input_tokens is None or prompt_tokens <= caps.max_input_tokens:
        return None
    return Rejection(400, f"The prompt is {prompt_tokens} tokens, above the limit of {caps.max_input_tokens} "
                          f"input tokens ({caps.source}.max_input_tokens).", param=param,
                     code="input_tokens_above_limit")
