"""What may be cut and continued, the cut, the long leg's body, and stop strings across the seam."""

from __future__ import annotations

import pytest

from policies.request.types import OUTPUT_FIELDS
from policies.routing.continuation import (
    Cut,
    SeamStop,
    continuable,
    continuation_body,
    continues,
    cut_body,
    cut_of,
    starts_short,
    stops_of,
)

FIELDS = OUTPUT_FIELDS["chat"]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("fields", "expected"), [
    ({}, True),
    ({"response_format": {"type": "text"}}, True),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, False),
    ({"response_format": {"type": "json_object"}}, False),
    ({"guided_regex": "a+"}, False),
    ({"structured_outputs": {"json": {}}}, False),
    ({"n": 2}, False),
    ({"n": 1}, True),
    ({"logprobs": True}, False),
    ({"logprobs": False}, True),
    ({"top_logprobs": 2}, False),
    ({"best_of": 3}, False),
    ({"continue_final_message": True}, False),
    ({"seed": 7}, False),
    ({"presence_penalty": 0.5}, False),
    ({"frequency_penalty": -0.2}, False),
    ({"presence_penalty": 0, "frequency_penalty": 0.0}, True),
    ({"repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.9, "logit_bias": {"5": 1}}, True),
])
def test_only_plain_text_with_one_choice_may_be_cut(fields: dict, expected: bool) -> None:
    assert continuable({**CHAT, **fields}, "chat") is expected


def test_completions_may_be_cut_with_one_text_prompt_and_no_echo() -> None:
    assert continuable({"model": "m", "prompt": "Once"}, "completions")
    assert continuable({"model": "m", "prompt": ["Once"]}, "completions")
    assert not continuable({"model": "m", "prompt": ["a", "b"]}, "completions")
    assert not continuable({"model": "m", "prompt": [1, 2, 3]}, "completions")
    assert not continuable({"model": "m", "prompt": "Once", "echo": True}, "completions")
    assert not continuable({"model": "m", "prompt": "Once", "logprobs": 0}, "completions")
    assert not continuable({**CHAT, "input": "x"}, "responses")


def test_unknown_templates_start_short_and_a_history_of_long_answers_does_not() -> None:
    assert starts_short(None, 0.2) and starts_short(0.2, 0.2) and starts_short(1.0, 0.2)
    assert not starts_short(0.19, 0.2)


def test_the_cut_keeps_the_clients_field_and_a_cap_that_fits_needs_none() -> None:
    assert cut_of({**CHAT, "max_tokens": 100}, 256, FIELDS) is None
    assert cut_of({**CHAT, "max_tokens": 256}, 256, FIELDS) is None
    cut = cut_of({**CHAT, "max_completion_tokens": 900}, 256, FIELDS)
    assert cut == Cut(256, "max_completion_tokens", 900)
    assert cut_body({**CHAT, "max_completion_tokens": 900}, cut)["max_completion_tokens"] == 256
    assert cut_of(CHAT, 256, FIELDS) == Cut(256, "max_tokens", None)


def test_only_a_stop_at_the_cut_with_room_left_continues() -> None:
    assert continues(Cut(16, "max_tokens", None), "length", 16)
    assert continues(Cut(16, "max_tokens", 40), "length", 16)
    assert not continues(Cut(16, "max_tokens", 16), "length", 16)
    assert not continues(Cut(16, "max_tokens", None), "stop", 12)
    assert not continues(Cut(16, "max_tokens", None), "length", 9)  # the engine's own context ran out


def test_the_long_leg_continues_the_partial_answer_with_what_is_left() -> None:
    body = {**CHAT, "max_tokens": 40, "min_tokens": 20, "stop": ["\n\n"]}
    chat = continuation_body(body, "chat", "Hello wor", 16, stream=True)
    assert chat["messages"][-1] == {"role": "assistant", "content": "Hello wor"}
    assert chat["continue_final_message"] is True and chat["add_generation_prompt"] is False
    assert (chat["max_tokens"], chat["min_tokens"], chat["stop"]) == (24, 4, ["\n\n"])
    assert chat["stream_options"] == {"include_usage": True}
    assert body["messages"] == CHAT["messages"]  # the planned body is not changed
    completion = continuation_body({"model": "m", "prompt": ["Once"]}, "completions", " upon", 16, stream=False)
    assert completion == {"model": "m", "prompt": "Once upon"}


def test_stop_strings_across_the_seam() -> None:
    assert stops_of({"stop": "END"}) == ("END",) and stops_of({"stop": ["a", "", 3]}) == ("a",)
    assert stops_of({}) == ()
    seam = SeamStop(("END", "\n\n"))
    assert seam.hold == 2
    assert seam.find("xE", "ND more") == 1  # starts in the held tail, ends in the long leg
    assert seam.find("xy", "END") is None  # wholly in the long leg: the engine's own stop found it
    assert not seam.settled("N", ended=False) and seam.settled("N", ended=True) and seam.settled("ND", ended=False)
    # the engine that continues found it itself and wrote only what came before its own part
    assert seam.matched_by_engine("a\nE", "", "END") == 2
    assert seam.matched_by_engine("a\nE", "", "other") is None
