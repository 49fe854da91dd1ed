"""OpenAI's x-ratelimit-* headers, written from the plain numbers the rate-limit policy gives."""

from __future__ import annotations

import pytest

from policies.admission.limits import RateLimits, Verdict, limit_states
from proxy.wire.headers import ResponseHeaders, ratelimit_headers, reset_text


def test_each_limit_writes_its_size_what_is_left_and_when_it_has_room() -> None:
    states = limit_states(RateLimits(100, 5000), Verdict(True, 99, 4100, 0.0, 0.0))
    assert ratelimit_headers(states) == [
        (b"x-ratelimit-limit-requests", b"100"), (b"x-ratelimit-remaining-requests", b"99"),
        (b"x-ratelimit-reset-requests", b"0ms"),
        (b"x-ratelimit-limit-tokens", b"5000"), (b"x-ratelimit-remaining-tokens", b"4100"),
        (b"x-ratelimit-reset-tokens", b"0ms"),
    ]


def test_a_tenant_limited_by_one_measure_gets_only_its_headers() -> None:
    tokens_only = limit_states(RateLimits(None, 50), Verdict(False, None, 10, 0.0, 12.5))
    assert ratelimit_headers(tokens_only) == [(b"x-ratelimit-limit-tokens", b"50"),
                                              (b"x-ratelimit-remaining-tokens", b"10"),
                                              (b"x-ratelimit-reset-tokens", b"12.5s")]
    assert ratelimit_headers(limit_states(RateLimits(), Verdict(True, None, None, 0.0, 0.0))) == []
    headers = ResponseHeaders()
    headers.rate_limits(tokens_only)
    assert headers == ratelimit_headers(tokens_only)


@pytest.mark.parametrize("seconds,text", [(0.0, "0ms"), (0.0201, "21ms"), (-1.0, "0ms"), (1.5, "1.5s"),
                                          (59.9994, "59.999s"), (360.0, "6m0s"), (61.7, "1m1s")])
def test_reset_times_read_as_openai_writes_them(seconds: float, text: str) -> None:
    assert reset_text(seconds) == text
