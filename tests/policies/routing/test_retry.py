from __future__ import annotations

from policies.routing.retry import retry_within_budget, retryable


def test_only_failures_that_left_nothing_half_done_are_retried() -> None:
    assert retryable(connect_failed=True, status=0, attempt=0, attempts=1)
    assert retryable(connect_failed=False, status=502, attempt=0, attempts=1)
    assert retryable(connect_failed=False, status=503, attempt=0, attempts=1)
    for status in (400, 429, 500, 504):  # the engine ran it, rejected it, or may still be running it
        assert not retryable(connect_failed=False, status=status, attempt=0, attempts=1)


def test_attempts_bound_the_retries_of_one_request() -> None:
    assert not retryable(connect_failed=True, status=0, attempt=1, attempts=1)
    assert retryable(connect_failed=True, status=0, attempt=1, attempts=2)
    assert not retryable(connect_failed=True, status=0, attempt=0, attempts=0)


def test_the_budget_caps_concurrent_retries_at_a_share_of_requests_with_a_floor() -> None:
    assert retry_within_budget(retrying=2, in_flight=4, budget=0.2, min_concurrent=3)  # the floor: 3
    assert not retry_within_budget(retrying=3, in_flight=4, budget=0.2, min_concurrent=3)
    assert retry_within_budget(retrying=19, in_flight=100, budget=0.2, min_concurrent=3)
    assert not retry_within_budget(retrying=20, in_flight=100, budget=0.2, min_concurrent=3)
