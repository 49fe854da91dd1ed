"""Output-length prediction and the pool it picks, on labelled cases."""

from __future__ import annotations

import pytest

from policies.admission.length import (
    DECISIVE,
    DECISIVE_MARGIN,
    MIN_SAMPLES,
    RECALL_SAMPLES,
    RECALL_WINDOW,
    RECENT,
    SHIFT,
    LengthFeatures,
    LengthHistory,
    PoolOption,
    ShortRecall,
    choose_by_length,
    features_of,
    length_key,
    predict,
    split_pays,
)
from policies.prompt.stable_prefix import chat_pieces

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


def chat_key(system: str, user: str, *, tenant: str = "acme", tool_result: bool = False,
             json_answer: bool = False) -> int:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if tool_result:
        messages += [{"role": "assistant", "content": None}, {"role": "tool", "content": "42 rows"}]
    return length_key(chat_pieces({"messages": messages}), True, tenant, "m", json_answer)


def test_the_length_key_is_the_template_not_the_users_words() -> None:
    """Under a one-line system prompt the user's words once made every request a key of its own."""
    assert chat_key("Classify the sentiment.", "I love it") == chat_key("Classify the sentiment.", "Meh, broken")
    assert chat_key("Classify the sentiment.", "I love it") != chat_key("Summarize the text.", "I love it")
    assert chat_key("Classify.", "x") != chat_key("Classify.", "x", tenant="globex")


def test_an_agents_step_after_a_tool_result_and_a_json_answer_learn_apart() -> None:
    plain = chat_key("You are an agent.", "Incident 7")
    assert plain != chat_key("You are an agent.", "Incident 7", tool_result=True)
    assert plain != chat_key("You are an agent.", "Incident 7", json_answer=True)


def test_a_completion_prompt_keys_on_its_start() -> None:
    head = "You are a poet. " * 40
    assert length_key((head + "roses",), False, "acme", "m", False) == length_key((head + "tulips",), False, "acme",
                                                                                     "m", False)


def test_a_history_forgets_answers_from_before_its_app_changed() -> None:
    """Long answers, then short ones: after SHIFT short ones in a row the prediction is short at once, where
    a window of 64 long answers needed most of 64 short ones to move its p90."""
    history = history_of([600 + n % 50 for n in range(RECENT)])
    for _ in range(SHIFT):
        history.observe(80)
    assert choose_by_length(POOLS, predict(LengthFeatures(None), history).p90).name == "short"


def test_a_heavy_tail_is_not_taken_for_a_change() -> None:
    history = history_of([100, 120, 90, 2000, 110, 95, 130, 105] * 8)
    before = predict(LengthFeatures(None), history).p90
    for tokens in (100, 3000, 90, 2500):
        history.observe(tokens)
    assert len(history.recent) == RECENT and predict(LengthFeatures(None), history).p90 == before


def test_short_recall_counts_only_short_answers_and_only_recent_ones() -> None:
    recall = ShortRecall(256)
    for _ in range(RECALL_SAMPLES - 1):
        recall.observe(predicted_p90=100, actual=50)  # caught
    recall.observe(predicted_p90=100, actual=900)  # a long answer: not a short one missed or caught
    assert recall.recall is None  # too few to judge
    recall.observe(predicted_p90=900, actual=50)  # a short answer predicted long
    assert recall.recall == pytest.approx((RECALL_SAMPLES - 1) / RECALL_SAMPLES)
    for _ in range(RECALL_WINDOW):
        recall.observe(predicted_p90=900, actual=200)  # the app's answers became unpredictable
    assert recall.recall == 0.0
    for _ in range(RECALL_WINDOW):
        recall.observe(predicted_p90=256, actual=256)  # and predictable again: at the threshold is short
    assert recall.recall == 1.0


def test_the_split_pays_only_once_measured_at_or_above_min_recall() -> None:
    assert not split_pays(None, 0.95)  # not measured yet: one pool
    assert not split_pays(0.94, 0.95)
    assert split_pays(0.95, 0.95)
    assert split_pays(None, 0.0) and split_pays(0.1, 0.0)  # 0: always split


def test_a_template_is_decided_by_its_last_answers_all_well_to_one_side_and_one_out_of_line_undoes_it() -> None:
    threshold = 256
    short, long = threshold // DECISIVE_MARGIN, threshold * DECISIVE_MARGIN
    assert history_of([3] * (DECISIVE - 1)).decided(threshold) is None  # too few yet
    assert history_of([3] * DECISIVE).decided(threshold) == "short"
    assert history_of([short] * DECISIVE).decided(threshold) == "short"
    assert history_of([short + 1] * DECISIVE).decided(threshold) is None  # short, but not by the margin
    assert history_of([600] * DECISIVE).decided(threshold) == "long"
    assert history_of([long - 1] * DECISIVE).decided(threshold) is None
    drifting = history_of([3] * 40 + [600])  # the classifier starts writing: back to the pool-wide rule at once
    assert drifting.decided(threshold) is None
    for _ in range(DECISIVE - 1):
        drifting.observe(600)
    assert drifting.decided(threshold) == "long"  # decided again on its new side


def test_a_prediction_carries_the_decision_unless_the_clients_own_cap_keeps_the_answer_short() -> None:
    writer = history_of([600] * DECISIVE)
    assert predict(LengthFeatures(None), writer, 256).decided == "long"
    assert predict(LengthFeatures(max_tokens=200), writer, 256).decided is None
    assert predict(LengthFeatures(None), history_of([3] * DECISIVE), 256).decided == "short"
    assert predict(LengthFeatures(None), writer).decided is None  # no short pool, nothing to decide
