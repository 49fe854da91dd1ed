"""The sliding-window limiter: exact counts in any rolling minute, waits that say when a request fits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies.admission.limits import WINDOW_SECONDS, RateLimits, SlidingWindow, output_reservation


def test_admits_exactly_the_request_limit_in_a_minute_then_says_when_the_oldest_leaves() -> None:
    window, limits = SlidingWindow(), RateLimits(requests_per_minute=3)
    verdicts = [window.admit(10.0 + i, 1, limits)[0] for i in range(5)]
    assert [v.admitted for v in verdicts] == [True, True, True, False, False]
    assert [v.remaining_requests for v in verdicts[:3]] == [2, 1, 0]
    assert verdicts[3].retry_after == WINDOW_SECONDS - 3  # the first entry (t=10) leaves at t=70; now t=13
    assert window.admit(69.9, 1, limits)[0].admitted is False
    assert window.admit(70.0, 1, limits)[0].admitted is True  # exactly one minute after the first


def test_token_limit_waits_for_enough_tokens_to_leave() -> None:
    window, limits = SlidingWindow(), RateLimits(tokens_per_minute=1000)
    assert window.admit(0.0, 400, limits)[0].admitted
    assert window.admit(5.0, 400, limits)[0].admitted
    refused = window.admit(6.0, 500, limits)[0]
    assert not refused.admitted and refused.remaining_tokens == 200
    assert refused.reset_tokens == WINDOW_SECONDS - 6  # the first 400 must leave (t=60) for 500 to fit
    big = window.admit(6.0, 1001, limits)[0]
    assert big.too_large and not big.admitted


def test_settling_gives_back_what_the_answer_did_not_use() -> None:
    window, limits = SlidingWindow(), RateLimits(tokens_per_minute=1000)
    _, entry = window.admit(0.0, 900, limits)
    assert entry is not None and not window.admit(1.0, 200, limits)[0].admitted
    window.settle(entry, 300)  # the answer was short
    assert window.admit(2.0, 200, limits)[0].admitted and window.tokens == 500


def test_settling_an_entry_that_left_the_window_changes_nothing() -> None:
    window, limits = SlidingWindow(), RateLimits(tokens_per_minute=1000)
    _, old = window.admit(0.0, 100, limits)
    window.admit(61.0, 50, limits)  # expires the first
    assert old is not None
    window.settle(old, 900)
    assert window.tokens == 50


def test_both_limits_must_allow_a_request() -> None:
    window, limits = SlidingWindow(), RateLimits(requests_per_minute=10, tokens_per_minute=100)
    assert window.admit(0.0, 90, limits)[0].admitted
    verdict = window.admit(1.0, 20, limits)[0]
    assert not verdict.admitted and verdict.reset_requests == 0 and verdict.reset_tokens > 0
    assert len(window.entries) == 1  # a refusal takes no place


@given(st.lists(st.tuples(st.floats(0, 5, allow_nan=False), st.integers(1, 50)), min_size=1, max_size=200))
def test_no_rolling_minute_ever_holds_more_than_the_limits(steps: list[tuple[float, int]]) -> None:
    window, limits = SlidingWindow(), RateLimits(requests_per_minute=7, tokens_per_minute=150)
    now, admitted = 0.0, []
    for gap, tokens in steps:
        now += gap
        if window.admit(now, tokens, limits)[0].admitted:
            admitted.append((now, tokens))
    for start, _ in admitted:
        inside = [t for at, t in admitted if start <= at < start + WINDOW_SECONDS]
        assert len(inside) <= 7 and sum(inside) <= 150


def test_output_reservation_is_the_smaller_of_max_tokens_and_the_prediction() -> None:
    assert output_reservation(1000, 120, 256) == 120
    assert output_reservation(64, 120, 256) == 64
    assert output_reservation(None, None, 256) == 256
