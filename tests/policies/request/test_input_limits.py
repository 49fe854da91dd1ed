"""Limits on a body's shape: each refusal names its limit and setting; bodies within them pass."""

from __future__ import annotations

import orjson

from policies.refusals import Rejection
from policies.request.input_limits import InputLimits, check_input_limits

LIMITS = InputLimits(max_json_depth=8, max_messages=3, max_content_chars=10, max_inputs=2)


def _check(endpoint: str, body: object, limits: InputLimits = LIMITS) -> Rejection | None:
    return check_input_limits(endpoint, orjson.dumps(body), body, limits)  # type: ignore[arg-type]


def _nested(levels: int) -> object:
    """``levels`` arrays, one inside the other."""
    value: object = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_bodies_within_the_limits_pass() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "0123456789"}] * 3,
            "tools": [{"type": "function", "function": {"parameters": {"type": "object"}}}]}
    assert _check("chat", body) is None
    assert _check("completions", {"model": "m", "prompt": ["short", "also"]}) is None
    assert _check("embeddings", {"model": "m", "input": "0123456789"}) is None


def test_nesting_past_the_depth_limit_is_refused_wherever_it_is() -> None:
    assert _check("chat", {"model": "m", "messages": [], "extra": _nested(7)}) is None  # 1 + 7 = 8 levels
    refused = _check("chat", {"model": "m", "messages": [], "extra": _nested(8)})
    assert refused is not None and refused.status == 400 and refused.code == "json_too_deep"
    assert "8 levels" in refused.message and "server.max_json_depth" in refused.message
    assert _check("embeddings", _nested(9)) is not None  # not even an object


def test_too_many_messages_names_the_count_and_the_limit() -> None:
    refused = _check("chat", {"model": "m", "messages": [{"role": "user", "content": "x"}] * 4})
    assert refused is not None and refused.param == "messages" and refused.code == "too_many_messages"
    assert "4 messages" in refused.message and "at most 3" in refused.message


def test_a_long_message_is_refused_whether_a_string_or_text_parts() -> None:
    refused = _check("chat", {"model": "m", "messages": [{"role": "user", "content": "x" * 11}]})
    assert refused is not None and refused.param == "messages[0].content" and refused.code == "content_too_long"
    parts = [{"type": "text", "text": "x" * 6}, {"type": "text", "text": "y" * 5}]
    refused = _check("chat", {"model": "m", "messages": [{"role": "system", "content": "ok"},
                                                         {"role": "user", "content": parts}]})
    assert refused is not None and refused.param == "messages[1].content"


def test_prompts_and_inputs_are_counted_and_measured() -> None:
    refused = _check("completions", {"model": "m", "prompt": ["a", "b", "c"]})
    assert refused is not None and refused.param == "prompt" and refused.code == "too_many_inputs"
    refused = _check("embeddings", {"model": "m", "input": ["ok", "x" * 11]})
    assert refused is not None and refused.param == "input[1]" and "server.max_content_chars" in refused.message
    refused = _check("completions", {"model": "m", "prompt": "x" * 11})
    assert refused is not None and refused.param == "prompt"


def test_odd_shapes_are_left_to_validation() -> None:
    """Wrong types are validation's to name; the limits only look at what they can measure."""
    assert _check("chat", {"model": "m", "messages": "not a list"}) is None
    assert _check("chat", {"model": "m", "messages": [3, None, {"content": 5}]}) is None
    assert _check("embeddings", {"model": "m", "input": 42}) is None


def test_responses_text_is_measured_as_chats_wherever_it_is() -> None:
    """A message item (a string or parts), ``instructions``, a tool's output and a call's arguments: the same
    text that chat refuses is refused here, naming where it is."""
    long, fine = "x" * 11, "0123456789"
    for body, param in (
            ({"input": long}, "input"),
            ({"input": [long]}, "input[0]"),
            ({"input": [{"role": "user", "content": long}]}, "input[0].content"),
            ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "x" * 6},
                                                     {"type": "input_text", "text": "y" * 5}]}]}, "input[0].content"),
            ({"input": fine, "instructions": long}, "instructions"),
            ({"input": [{"role": "user", "content": fine},
                        {"type": "function_call_output", "call_id": "c", "output": long}]}, "input[1].output"),
            ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": long}]},
             "input[0].arguments")):
        refused = _check("responses", {"model": "m", **body})
        assert refused is not None and refused.code == "content_too_long", body
        assert refused.param == param and "server.max_content_chars" in refused.message
    within = {"model": "m", "instructions": fine, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": fine}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": fine},
        {"type": "function_call_output", "call_id": "c", "output": fine}]}
    assert _check("responses", within) is None
    refused = _check("responses", {"model": "m", "input": [{"role": "user", "content": "x"}] * 4})
    assert refused is not None and refused.param == "input" and refused.code == "too_many_messages"
    assert "server.max_messages" in refused.message
