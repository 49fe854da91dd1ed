"""An output cap that fits the engine's context: the room a prompt leaves, and the cap lowered to it in every API's
field, the pool's default cap included; a cap that fits, or none, goes as sent."""

from __future__ import annotations

from typing import Any

import orjson

from policies.admission.context_fit import fit_output, output_room, prompt_spare, surely_fits
from policies.admission.request_plan import ShapedBody, plan_call, shape_body
from policies.admission.token_caps import TokenCaps
from policies.prompt.cache_salt import salt_policy
from policies.refusals import Rejection
from policies.request.types import OUTPUT_FIELDS
from policies.request.validate import validate_request
from tests.support.chat_body import chat_body

CONTEXT = 65_536
AGENT_PROMPT = 45_422  # a coding agent's prompt in the tiny model's tokens


def test_an_exact_count_keeps_a_small_spare_and_an_estimate_half_as_much_again() -> None:
    assert prompt_spare(AGENT_PROMPT, exact=True) == AGENT_PROMPT // 50 + 64
    assert output_room(CONTEXT, AGENT_PROMPT, exact=True) == CONTEXT - AGENT_PROMPT - 908 - 64 == 19_142
    estimated = output_room(CONTEXT, 20_000, exact=False)  # taken as 30,000 tokens, and 2 % of them spare
    assert estimated == CONTEXT - 30_000 - 600 - 64
    assert output_room(CONTEXT, 1_000, exact=True) == CONTEXT - 1_000 - 20 - 64


def test_the_spare_takes_at_most_half_of_what_the_count_leaves_and_nothing_fits_a_full_context() -> None:
    left = CONTEXT - AGENT_PROMPT
    assert output_room(CONTEXT, AGENT_PROMPT, exact=False) == left - left // 2  # the estimate's spare is 22,000+
    assert output_room(CONTEXT, CONTEXT - 1, exact=True) == 1
    assert output_room(CONTEXT, CONTEXT, exact=True) is None  # the engine's own refusal names the prompt
    assert output_room(CONTEXT, CONTEXT + 10, exact=False) is None


def test_a_cap_that_fits_even_were_each_byte_a_token_needs_no_count() -> None:
    """The embedded pool's default 1,024 fits beside any prompt under ~63 KB: no encode of the prompt."""
    assert surely_fits(1024, 62_000, CONTEXT)  # 1,024 + 62,000 + 1,240 + 64 <= 65,536
    assert not surely_fits(1024, 64_000, CONTEXT)
    assert surely_fits(CONTEXT - 1_000 - 20 - 64, 1_000, CONTEXT)
    assert not surely_fits(CONTEXT - 1_000 - 20 - 63, 1_000, CONTEXT)


def test_a_cap_above_the_room_is_lowered_in_each_apis_own_field() -> None:
    for endpoint, field in (("chat", "max_completion_tokens"), ("completions", "max_tokens"),
                            ("responses", "max_output_tokens"), ("messages", "max_tokens")):
        body = {"model": "m", field: 32_000}
        fitted = fit_output(body, OUTPUT_FIELDS[endpoint], 19_142)
        assert fitted == ({"model": "m", field: 19_142}, 19_142), endpoint
        assert body[field] == 32_000  # the body as received stays as it was


def test_chats_second_field_is_lowered_too_or_it_would_undo_the_cap() -> None:
    body = {"model": "m", "max_completion_tokens": 30_000, "max_tokens": 32_000}
    fitted = fit_output(body, OUTPUT_FIELDS["chat"], 1_000)
    assert fitted is not None and fitted[0] == {"model": "m", "max_completion_tokens": 1_000, "max_tokens": 1_000}
    small = {"model": "m", "max_completion_tokens": 3_000, "max_tokens": 500}
    fitted = fit_output(small, OUTPUT_FIELDS["chat"], 1_000)
    assert fitted is not None and fitted[0] == {"model": "m", "max_completion_tokens": 1_000, "max_tokens": 500}


def test_a_cap_that_fits_or_none_at_all_goes_as_sent() -> None:
    fields = OUTPUT_FIELDS["chat"]
    assert fit_output({"model": "m", "max_tokens": 1_000}, fields, 1_000) is None
    assert fit_output({"model": "m"}, fields, 10) is None  # the engine writes to the context's end itself
    assert fit_output({"model": "m", "max_output_tokens": 32_000}, fields, 10) is None  # not chat's field


def _shaped(body: dict[str, Any], room: int | None, caps: TokenCaps | None = None) -> ShapedBody:
    view = validate_request("chat", body)
    assert not isinstance(view, Rejection)
    plan = plan_call(view, body, salt=salt_policy("off", b"secret-0123456789", "acme"), caps=caps,
                     engine_usage=True, answers=False, announce_pool=False, room=room)
    shaped = shape_body(orjson.dumps(body), body, False, plan)
    assert isinstance(shaped, ShapedBody)
    return shaped


def test_the_plan_sends_the_cap_that_fits_and_says_so() -> None:
    shaped = _shaped(chat_body(max_tokens=32_000), room=19_142)
    assert orjson.loads(shaped.raw)["max_tokens"] == shaped.body["max_tokens"] == shaped.clamped == 19_142
    fits = chat_body(max_tokens=8_000)
    shaped = _shaped(fits, room=19_142)
    assert shaped.raw == orjson.dumps(fits) and shaped.clamped is None
    assert _shaped(chat_body(max_tokens=32_000), room=None).clamped is None  # the pool's context is not known


def test_the_pools_default_cap_is_lowered_to_fit_too() -> None:
    shaped = _shaped(chat_body(), room=500, caps=TokenCaps(default_max_tokens=1024, source="pool 'local'"))
    assert shaped.body["max_tokens"] == shaped.clamped == 500
    shaped = _shaped(chat_body(), room=5_000, caps=TokenCaps(default_max_tokens=1024, source="pool 'local'"))
    assert shaped.body["max_tokens"] == 1024 and shaped.clamped is None
