"""Every refusal becomes an OpenAI-shaped error in one place, with the status and code clients key on."""

from __future__ import annotations

import typing

import orjson
import pytest

from policies.admission.limits import RateLimits, Verdict, rate_limited
from policies.refusals import (
    AdminOnly,
    InternalError,
    LimiterDown,
    ModelNotInPool,
    ProviderFailed,
    RateLimited,
    Refusal,
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
from proxy.wire.errors import openai_error

EXAMPLES: list[tuple[Refusal, int, str | None]] = [
    (Rejection(400, "messages must be a list", param="messages", code="invalid_type"), 400, "invalid_type"),
    (Unauthorized("missing"), 401, "missing_api_key"),
    (Unauthorized("malformed"), 401, "invalid_api_key"),
    (Unauthorized("invalid"), 401, "invalid_api_key"),
    (AdminOnly("/metrics"), 401, "invalid_api_key"),
    (UnknownModel("gpt-9"), 404, "model_not_found"),
    (UnknownPool("huge", ("short", "long")), 400, "unknown_pool"),
    (UnknownTenant(None), 400, "missing_tenant"),
    (UnknownTenant("gamma"), 400, "unknown_tenant"),
    (ModelNotInPool("short", "gpt-9"), 400, "model_not_in_pool"),
    (rate_limited(RateLimits(10, None), Verdict(False, 0, None, 2.5, 0.0), 100), 429, "rate_limit_exceeded"),
    (rate_limited(RateLimits(None, 50), Verdict(False, None, 50, 0.0, 0.0, too_large=True), 80), 429,
     "rate_limit_exceeded"),
    (LimiterDown(0.2), 503, "rate_limiter_unavailable"),
    (StateUnavailable(2.0), 503, "response_store_unavailable"),
    (Shed("chat", "queue_full", 5.0), 503, "queue_full"),
    (Shed("chat", "queue_share_exceeded", 5.0), 503, "queue_share_exceeded"),
    (Shed("chat", "queue_timeout", 2.0, queue_timeout=2.0), 503, "queue_timeout"),
    (Shed("chat", "no_healthy_upstream", 0.3), 503, "no_healthy_upstream"),
    (UpstreamFailed("chat", "timeout"), 504, "upstream_timeout"),
    (UpstreamFailed("chat", "unreachable"), 502, "upstream_unreachable"),
    (UpstreamFailed("chat", "broken"), 502, "upstream_broken"),
    (ProviderFailed("hosted", 400, "bad model"), 400, "provider_error"),
    (ShuttingDown(), 503, "shutting_down"),
    (TooManyConnections(), 503, "too_many_connections"),
    (RequestTimeout(), 408, "request_timeout"),
    (InternalError(), 500, None),
]


def test_every_kind_of_refusal_has_an_example() -> None:
    kinds = set(typing.get_args(Refusal))
    assert kinds == {type(refusal) for refusal, _, _ in EXAMPLES}


@pytest.mark.parametrize(("refusal", "status", "code"), EXAMPLES, ids=lambda v: type(v).__name__)
def test_each_refusal_is_an_openai_error_with_its_status_and_code(refusal: Refusal, status: int,
                                                                  code: str | None) -> None:
    error = openai_error(refusal)
    assert (error.status, error.code) == (status, code)
    body = orjson.loads(error.body())
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] and body["error"]["type"]
    too_large = isinstance(refusal, RateLimited) and refusal.too_large  # waiting would not help
    if status in (429, 503) and not too_large:
        headers = {name.lower(): value for name, value in error.headers.items()}
        assert int(headers["retry-after"]) >= 1  # clients back off instead of hammering


def test_rate_limit_answers_say_which_limit_and_when_to_retry() -> None:
    error = openai_error(rate_limited(RateLimits(10, 1000), Verdict(False, 0, 900, 2.5, 0.0), 100))
    assert error.type == "requests" and "limit 10" in error.message
    assert error.headers["Retry-After"] == "3" and error.headers["retry-after-ms"] == "2500"
    assert error.headers["x-ratelimit-remaining-requests"] == "0"


def test_a_shed_request_waits_at_least_a_second_before_it_retries() -> None:
    assert openai_error(Shed("chat", "no_healthy_upstream", 0.01)).headers["Retry-After"] == "1"
    assert openai_error(Shed("chat", "queue_timeout", 7.2, queue_timeout=7.2)).headers["Retry-After"] == "8"
