"""OpenAI-shaped errors: every error prefixgate itself produces looks like one from api.openai.com.

``openai_error`` is the one place a ``Refusal`` (what went wrong, as plain data) becomes an HTTP
status, message, type, code and headers; nothing else in the gateway builds an ``OpenAIError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from policies.refusals import (
    AdminOnly,
    InternalError,
    LimiterDown,
    ModelNotInPool,
    ProviderFailed,
    RateLimited,
    Refusal,
    Refused,
    Rejection,
    RequestTimeout,
    Shed,
    ShuttingDown,
    StateUnavailable,
    TooManyConnections,
    Unauthorized,
    UnknownModel,
    UnknownPool,
    UnknownTenant,
    UpstreamFailed,
)
from proxy.wire.headers import API_KEY_NAME, POOL, TENANT, ratelimit_headers, reset_text
from proxy.wire.sse_keepalive import COMMENT

POOL_PARAM, TENANT_PARAM = POOL.decode(), TENANT.decode()  # the header an error's ``param`` names

_DEFAULT_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class OpenAIError:
    """An error answer as OpenAI's API writes it: built by ``openai_error``, sent on a bare ASGI ``send``
    or as a Starlette ``Response``."""

    __slots__ = ("code", "headers", "message", "param", "status", "type")

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.type = type or _DEFAULT_TYPES.get(status, "server_error")
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> Response:
        return Response(self.body(), self.status, headers=self.headers, media_type="application/json")

    def header_pairs(self) -> tuple[tuple[bytes, bytes], ...]:
        """Its own headers (Retry-After, a 429's x-ratelimit-*) as a bare ASGI answer sends them."""
        return tuple((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items())


class ErrorShape(Protocol):
    """An API's own wire shape for what the gateway itself writes into an answer (``ClientAnswer.errors``): a
    refusal as its error answer, that error as a stream's last event, an engine's own error as that event, and
    the stream's keep-alive."""

    @property
    def keepalive(self) -> bytes: ...

    def error(self, refusal: Refusal) -> OpenAIError: ...

    def event(self, error: OpenAIError) -> bytes: ...

    def engine_event(self, body: bytes) -> bytes | None: ...  # None: not an error in this API's shape


class OpenAIErrors:
    """OpenAI's: ``{"error": {message, type, param, code}}``, the same object as an SSE ``data:`` event; an
    SSE comment as the keep-alive."""

    __slots__ = ()
    keepalive = COMMENT

    def error(self, refusal: Refusal) -> OpenAIError:
        return openai_error(refusal)

    def event(self, error: OpenAIError) -> bytes:
        return sse_error_event(error.message, error.type, error.code)

    def engine_event(self, body: bytes) -> bytes | None:
        try:
            error = orjson.loads(body).get("error")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n" if isinstance(error, dict) else None


OPENAI_ERRORS = OpenAIErrors()


def openai_error(refusal: Refusal) -> OpenAIError:
    """The HTTP answer for a refusal: OpenAI's status, type and code where it has one for the case."""
    match refusal:
        case Rejection(status, message, param, code, type_):
            return OpenAIError(status, message, type=type_, param=param, code=code)
        case Unauthorized("missing"):
            return OpenAIError(401, "Missing API key. Send it as 'Authorization: Bearer <key>' or "
                                    f"'{API_KEY_NAME}: <key>'.", code="missing_api_key")
        case Unauthorized("malformed"):
            return OpenAIError(401, "Malformed Authorization header; expected 'Bearer <key>'.", code="invalid_api_key")
        case Unauthorized():
            return OpenAIError(401, "Incorrect API key provided.", code="invalid_api_key")
        case AdminOnly(path):
            return OpenAIError(401, f"{path} needs the admin key (auth.admin_key) as 'Authorization: Bearer <key>'.",
                               code="invalid_api_key")
        case UnknownModel(model):
            return OpenAIError(404, f"The model '{model}' does not exist or is not served here.", param="model",
                               code="model_not_found")
        case UnknownPool() | UnknownTenant() | ModelNotInPool():
            return _bad_header(refusal)
        case RateLimited():
            return _rate_limited(refusal)
        case LimiterDown(retry_after):
            wait = str(max(1, math.ceil(retry_after)))
            return OpenAIError(503, "Rate limits cannot be checked right now (their shared store is unreachable); "
                                    f"try again in {wait} s.", type="server_error", code="rate_limiter_unavailable",
                               headers={"Retry-After": wait})
        case StateUnavailable(retry_after):
            wait = str(max(1, math.ceil(retry_after)))
            return OpenAIError(503, "Stored responses cannot be read right now (their store is unreachable); "
                                    f"try again in {wait} s.", type="server_error", code="response_store_unavailable",
                               headers={"Retry-After": wait})
        case Shed():
            return _shed(refusal)
        case UpstreamFailed(pool, "timeout"):
            return OpenAIError(504, f"Upstream pool '{pool}' did not answer in time.", code="upstream_timeout")
        case UpstreamFailed(pool, "unreachable"):
            return OpenAIError(502, f"Upstream pool '{pool}' is unreachable.", code="upstream_unreachable",
                               headers={"Retry-After": "1"})
        case UpstreamFailed(pool):
            return OpenAIError(502, f"Upstream pool '{pool}' broke off its answer.", code="upstream_broken")
        case ProviderFailed(pool, status, detail):
            return OpenAIError(status, f"Pool '{pool}' (litellm): {detail}", code="provider_error")
        case ShuttingDown():
            return OpenAIError(503, "prefixgate is shutting down; retry the request.", type="server_error",
                               code="shutting_down", headers={"Retry-After": "1"})
        case TooManyConnections():
            return OpenAIError(503, "The gateway is at its connection cap (server.max_connections) with every "
                                    "connection busy; retry shortly.", code="too_many_connections",
                               headers={"retry-after": "1", "connection": "close"})
        case RequestTimeout(evicted):
            return OpenAIError(408, "The gateway is at its connection cap (server.max_connections) and this request "
                                    "was the slowest to arrive." if evicted else "The request did not arrive in time "
                                    "(server.header_timeout_s for headers, server.body_timeout_s for the body).",
                               type="invalid_request_error", code="request_timeout")
        case InternalError():
            return OpenAIError(500, "Internal error in prefixgate.", type="server_error")
    raise TypeError(f"not a refusal: {refusal!r}")


def _bad_header(refusal: UnknownPool | UnknownTenant | ModelNotInPool) -> OpenAIError:
    """A prefixgate header (x-prefixgate-pool, x-prefixgate-tenant) that names nothing it can serve."""
    match refusal:
        case UnknownPool(name, pools):
            return OpenAIError(400, f"{POOL_PARAM} names no pool: '{name}' (pools: {', '.join(pools)}).",
                               param=POOL_PARAM, code="unknown_pool")
        case UnknownTenant(None):
            return OpenAIError(400, f"Name the tenant whose request this is in the header {TENANT_PARAM}.",
                               param=TENANT_PARAM, code="missing_tenant")
        case UnknownTenant(name):
            return OpenAIError(400, f"{TENANT_PARAM} names no tenant: '{name}'.", param=TENANT_PARAM,
                               code="unknown_tenant")
    return OpenAIError(400, f"Pool '{refusal.pool}' ({POOL_PARAM}) does not serve the model '{refusal.model}'.",
                       param=POOL_PARAM, code="model_not_in_pool")


def _rate_limited(refusal: RateLimited) -> OpenAIError:
    headers = {k.decode(): v.decode() for k, v in ratelimit_headers(refusal.limits)}
    if refusal.too_large:
        tokens = next(state.limit for state in refusal.limits if state.unit == "tokens")
        return OpenAIError(429, f"Request too large: {refusal.tokens} tokens (prompt plus reserved output) against a "
                                f"limit of {tokens} tokens per minute; lower max_tokens or the "
                                "prompt.", type="tokens", code="rate_limit_exceeded", headers=headers)
    wait, which, limit = refusal.refusing.reset, refusal.refusing.unit, refusal.refusing.limit
    headers["Retry-After"] = str(max(1, math.ceil(wait)))
    headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
    return OpenAIError(429, f"Rate limit reached for {which} per minute: limit {limit}. "
                            f"Try again in {reset_text(wait)}.", type=which, code="rate_limit_exceeded",
                       headers=headers)


def _shed(refusal: Shed) -> OpenAIError:
    pool, reason = refusal.pool, refusal.reason
    if reason == "no_healthy_upstream":
        message = f"No healthy replica in pool '{pool}'."
    elif reason == "queue_full":
        message = f"Pool '{pool}' is saturated: its wait queue is full."
    elif reason == "queue_share_exceeded":
        message = f"Pool '{pool}' is saturated and this tenant holds its share of the wait queue."
    else:
        message = f"Pool '{pool}' is saturated: no slot within {refusal.queue_timeout:g} s."
    return OpenAIError(503, message, code=reason, headers={"Retry-After": str(max(1, math.ceil(refusal.retry_after)))})


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def sse_error_event(message: str, type: str, code: str | None = None) -> bytes:
    """The last event of a stream that broke after its first byte: the status line is long gone."""
    return b"data: " + error_body(message, type, None, code) + b"\n\n"


def refusal_event(refusal: Refusal) -> bytes:
    """A refusal as the last event of a stream whose status line already went out (keep-alives)."""
    error = openai_error(refusal)
    return sse_error_event(error.message, error.type, error.code)


async def refused_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return openai_error(exc.refusal).response()


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 answers, in OpenAI's shape so SDKs can parse them."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"Unknown route: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return OpenAIError(exc.status_code, message, headers=exc.headers).response()


async def unexpected_error_handler(request: Request, exc: Exception) -> Response:
    """Last resort: a bug must still answer in OpenAI's shape, without a traceback in the body."""
    return openai_error(InternalError()).response()
