"""Anthropic-shaped errors, for the Messages API: what the Anthropic SDKs and Claude Code read.

Every refusal is first the gateway's one ``OpenAIError`` (``openai_error``: its status, message and headers,
Retry-After and the rate-limit headers included); this shape writes it as Anthropic's API does,
``{"type": "error", "error": {"type": ..., "message": ...}}``, with Anthropic's error type for its status. A
shed or unavailable gateway (503) answers 529 ``overloaded_error``, the status Anthropic's clients retry as
overload. In a stream the error is an ``event: error`` with the same object, and the keep-alive is
Anthropic's ``ping`` event.
"""

from __future__ import annotations

import orjson

from policies.refusals import Refusal
from proxy.wire.errors import OpenAIError, openai_error

PING = b'event: ping\ndata: {"type":"ping"}\n\n'
OVERLOADED = 529

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    OVERLOADED: "overloaded_error",
}


def anthropic_type(status: int) -> str:
    return _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


class AnthropicError(OpenAIError):
    """One error as Anthropic's API writes it (the fields the gateway's records read are OpenAI's)."""

    __slots__ = ()

    def body(self) -> bytes:
        return anthropic_error_body(anthropic_type(self.status), self.message)


def anthropic_error_body(kind: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


class AnthropicErrors:
    """Anthropic's error shape (``ErrorShape``) and ping keep-alive."""

    __slots__ = ()
    keepalive = PING

    def error(self, refusal: Refusal) -> OpenAIError:
        error = openai_error(refusal)
        status = OVERLOADED if error.status == 503 else error.status
        return AnthropicError(status, error.message, type=error.type, param=error.param, code=error.code,
                              headers=error.headers)

    def event(self, error: OpenAIError) -> bytes:
        return b"event: error\ndata: " + anthropic_error_body(anthropic_type(error.status), error.message) + b"\n\n"

    def engine_event(self, body: bytes) -> bytes | None:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(decoded, dict) or not isinstance(decoded.get("error"), dict):
            return None
        return b"event: error\ndata: " + orjson.dumps({"type": "error", "error": decoded["error"]}) + b"\n\n"


ANTHROPIC_ERRORS = AnthropicErrors()
