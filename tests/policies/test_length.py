"""Output-length prediction and the pool it picks, on labelled cases."""

from __future__ import annotations

import pytest

from policies.length import (
    MIN_SAMPLES,
    LengthFeatures,
    LengthHistory,
    PoolOption,
    choose_by_length,
    features_of,
    predict,
)

POOLS = [PoolOption("short", "short", 256), PoolOption("long", "long", 256)]


def history_of(values: list[int]) -> LengthHistory:
    history = LengthHistory()
    for value in values:
        history.observe(value)
    return history


@pytest.mark.parametrize(("body", "expected"), [
    ({"max_tokens": 64}, "short"),  # the client bounds it short
    ({"max_tokens": 256}, "short"),  # at the threshold
    ({"max_tokens": 2048}, "long"),
    ({}, "long"),  # nothing known: assumed long
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "short"),  # a tool call
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"}, "long"),
    ({"response_format": {"type": "json_object"}, "max_tokens": 200}, "short"),
    ({"response_format": {"type": "json_object"}}, "long"),  # structured, but may be large
])
def test_labelled_requests_without_history(body: dict, expected: str) -> None:
    prediction = predict(features_of(body, body.get("max_tokens")), None)
    assert prediction.source == "prior"
    assert choose_by_length(POOLS, prediction.p90).name == expected


def test_history_of_short_answers_sends_an_open_ended_request_to_the_short_pool() -> None:
    features = LengthFeatures(max_tokens=None)
    assert choose_by_length(POOLS, predict(features, history_of([40] * (MIN_SAMPLES - 1))).p90).name == "long"
    learned = predict(features, history_of([30, 40, 50, 45, 35, 60, 55, 40]))
    assert learned.source == "history" and learned.p90 == 60 and choose_by_length(POOLS, learned.p90).name == "short"


def test_history_of_long_answers_goes_long_and_max_tokens_still_bounds_it() -> None:
    long_answers = history_of([700, 800, 900, 650, 720, 1000, 880, 760])
    assert choose_by_length(POOLS, predict(LengthFeatures(None), long_answers).p90).name == "long"
    bounded = predict(LengthFeatures(max_tokens=100), long_answers)
    assert bounded.p90 == 100 and bounded.p95 == 100


def test_history_keeps_only_recent_answers() -> None:
    history = history_of([2000] * 64 + [20] * 64)  # the tenant changed its prompt: answers got short
    assert history.quantile(0.95) == 20 and len(history.sorted) == 64


def test_pool_choice_falls_back_to_any_pool_and_to_short_pools_alone() -> None:
    assert choose_by_length([PoolOption("a", "any", 0), PoolOption("s", "short", 128)], 500).name == "a"
    assert choose_by_length([PoolOption("s", "short", 128)], 500).name == "s"
