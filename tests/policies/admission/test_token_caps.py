"""max_tokens defaults, clamps and refusals; the input-token cap."""

from __future__ import annotations

from policies.admission.token_caps import TokenCaps, cap_output, check_prompt_tokens
from policies.refusals import Rejection
from policies.request.types import OUTPUT_FIELDS

CHAT, COMPLETIONS, RESPONSES = OUTPUT_FIELDS["chat"], OUTPUT_FIELDS["completions"], OUTPUT_FIELDS["responses"]


def test_a_request_without_max_tokens_gets_the_default_within_the_limit() -> None:
    assert cap_output({"model": "m"}, TokenCaps(default_max_tokens=300), CHAT)["max_tokens"] == 300
    assert cap_output({"model": "m"}, TokenCaps(max_tokens=200, default_max_tokens=300), CHAT)["max_tokens"] == 200
    body = {"model": "m"}
    assert cap_output(body, TokenCaps(max_tokens=200), CHAT) is body  # a limit alone adds nothing


def test_clamp_lowers_max_tokens_to_the_limit_and_reject_names_it() -> None:
    body = {"model": "m", "max_tokens": 5000}
    assert cap_output(body, TokenCaps(max_tokens=1024), CHAT)["max_tokens"] == 1024
    refused = cap_output(body, TokenCaps(max_tokens=1024, action="reject", source="pool 'short'"), CHAT)
    assert isinstance(refused, Rejection) and refused.status == 400 and refused.param == "max_tokens"
    assert "5000" in refused.message and "1024" in refused.message and "pool 'short'.max_tokens" in refused.message
    within = {"model": "m", "max_tokens": 100}
    assert cap_output(within, TokenCaps(max_tokens=1024, action="reject"), CHAT) is within


def test_max_completion_tokens_is_the_field_clamped_and_a_larger_max_tokens_follows() -> None:
    body = {"model": "m", "max_completion_tokens": 4000, "max_tokens": 3000}
    capped = cap_output(body, TokenCaps(max_tokens=500), CHAT)
    assert capped["max_completion_tokens"] == 500 and capped["max_tokens"] == 500
    refused = cap_output(body, TokenCaps(max_tokens=500, action="reject"), CHAT)
    assert isinstance(refused, Rejection) and refused.param == "max_completion_tokens"


def test_input_cap() -> None:
    assert check_prompt_tokens(100, TokenCaps(max_input_tokens=100), "messages") is None
    refused = check_prompt_tokens(101, TokenCaps(max_input_tokens=100), "messages")
    assert refused is not None and refused.status == 400 and refused.param == "messages" and "101" in refused.message
    assert check_prompt_tokens(10**6, TokenCaps(), "prompt") is None


def test_a_responses_body_is_capped_on_max_output_tokens_the_one_field_its_api_reads() -> None:
    body = {"model": "m", "input": "hi"}
    assert cap_output(body, TokenCaps(default_max_tokens=300), RESPONSES) == {**body, "max_output_tokens": 300}
    capped = cap_output({**body, "max_output_tokens": 5000}, TokenCaps(max_tokens=1024), RESPONSES)
    assert capped["max_output_tokens"] == 1024
    refused = cap_output({**body, "max_output_tokens": 5000}, TokenCaps(max_tokens=1024, action="reject"), RESPONSES)
    assert isinstance(refused, Rejection) and refused.param == "max_output_tokens"
    # a chat field the Responses API ignores does not stand in for the cap, nor the other way round
    capped = cap_output({**body, "max_tokens": 10}, TokenCaps(max_tokens=64, default_max_tokens=300), RESPONSES)
    assert capped["max_output_tokens"] == 64
    chat = cap_output({"model": "m", "messages": [], "max_output_tokens": 1}, TokenCaps(default_max_tokens=300),
                      CHAT)
    assert chat["max_tokens"] == 300


def test_the_field_capped_follows_the_endpoint_whatever_else_the_body_holds() -> None:
    """A chat or completions body with a stray ``input`` is capped on the field its engine reads."""
    reject = TokenCaps(max_tokens=64, action="reject")
    for fields, body in ((CHAT, {"model": "m", "messages": [], "max_tokens": 100000, "input": 0}),
                         (COMPLETIONS, {"model": "m", "prompt": "p", "max_tokens": 100000, "input": 0})):
        refused = cap_output(body, reject, fields)
        assert isinstance(refused, Rejection) and refused.param == "max_tokens"
        assert cap_output(body, TokenCaps(max_tokens=64), fields)["max_tokens"] == 64
    # completions' engine reads max_tokens alone: chat's newer name there caps nothing
    body = {"model": "m", "prompt": "p", "max_completion_tokens": 5}
    assert cap_output(body, TokenCaps(default_max_tokens=300), COMPLETIONS)["max_tokens"] == 300
