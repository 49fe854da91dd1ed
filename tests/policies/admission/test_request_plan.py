"""The request plan: what goes upstream once the pool is known (salt, stream usage, pool caps, answer cache)."""

from __future__ import annotations

from typing import Any

import orjson

from policies.admission.request_plan import CallPlan, ShapedBody, plan_call, shape_body, with_field
from policies.admission.token_caps import TokenCaps
from policies.prompt.cache_salt import CacheMode, salt_policy
from policies.refusals import Rejection
from policies.request.validate import validate_request
from tests.support.chat_body import chat_body

SECRET = b"deployment-secret-0123456789"
USAGE = {"include_usage": True}
# as a client might send it: spaces, a line break, a trailing newline; re-serializing would change these bytes
RAW_STREAM = b'{ "model": "m",\n  "stream": true, "messages": [{"role": "user", "content": "hi"}] }\n'


def _plan(body: dict[str, Any], *, mode: CacheMode = "isolate", caps: TokenCaps | None = None,
          engine_usage: bool = True, answers: bool = False) -> CallPlan:
    view = validate_request("chat", body)
    assert not isinstance(view, Rejection)
    return plan_call(view, body, salt=salt_policy(mode, SECRET, "acme"), caps=caps, engine_usage=engine_usage,
                     answers=answers, announce_pool=False)


def _shape(body: dict[str, Any], *, raw: bytes | None = None, changed: bool = False, **plan: Any) -> ShapedBody:
    shaped = shape_body(orjson.dumps(body) if raw is None else raw, body, changed, _plan(body, **plan))
    assert isinstance(shaped, ShapedBody)
    return shaped


def test_an_unchanged_body_gets_the_salt_and_usage_option_spliced_into_its_own_bytes() -> None:
    body = orjson.loads(RAW_STREAM)
    salt = salt_policy("isolate", SECRET, "acme").own
    shaped = _shape(body, raw=RAW_STREAM)
    assert shaped.raw == (RAW_STREAM.rstrip()[:-1] + b',"cache_salt":"' + salt.encode() + b'"'
                          + b',"stream_options":{"include_usage":true}}')
    assert orjson.loads(shaped.raw) == {**body, "cache_salt": salt, "stream_options": USAGE}


def test_a_changed_body_is_serialized_once_with_the_salt_and_usage_option() -> None:
    rewritten = chat_body(stream=True, stream_options={"include_usage": False, "continuous_usage_stats": True})
    shaped = _shape(rewritten, raw=b'{"model": "m", "what": "the client sent before the rewrite"}', changed=True)
    options = {"include_usage": True, "continuous_usage_stats": True}  # the client's other options stay
    sent = {**rewritten, "cache_salt": salt_policy("isolate", SECRET, "acme").own, "stream_options": options}
    assert shaped.raw == orjson.dumps(sent)
    assert shaped.body == sent  # what admission charges and the answer cache keys on is what was sent


def test_a_clients_own_salt_is_replaced_by_the_tenants_hmac_of_it() -> None:
    shaped = _shape(chat_body(cache_salt="mine"))
    sent = orjson.loads(shaped.raw)["cache_salt"]
    assert sent == salt_policy("isolate", SECRET, "acme").upstream_salt("mine")
    assert sent not in ("mine", salt_policy("isolate", SECRET, "acme").own)


def test_salt_mode_off_sends_no_salt_and_drops_the_clients() -> None:
    assert _plan(chat_body(), mode="off").salt is None
    raw = orjson.dumps(chat_body())
    assert _shape(chat_body(), raw=raw, mode="off").raw == raw
    shaped = _shape(chat_body(cache_salt="mine"), mode="off")
    assert orjson.loads(shaped.raw) == chat_body() and "cache_salt" not in shaped.body


def test_a_stream_whose_client_asked_for_usage_keeps_it_as_sent_and_nothing_is_hidden() -> None:
    body = chat_body(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True})
    assert _plan(body).ask_usage is False
    assert orjson.loads(_shape(body).raw)["stream_options"] == body["stream_options"]


def test_a_stream_whose_client_did_not_ask_gets_usage_asked_for_and_hidden() -> None:
    body = chat_body(stream=True)
    assert _plan(body).ask_usage is True
    assert orjson.loads(_shape(body).raw)["stream_options"] == USAGE


def test_no_stream_options_for_a_whole_answer_or_a_pool_that_counts_usage_itself() -> None:
    for body, engine_usage in ((chat_body(), True), (chat_body(stream=True), False)):  # the second: a litellm pool
        assert _plan(body, engine_usage=engine_usage).ask_usage is False
        assert "stream_options" not in orjson.loads(_shape(body, engine_usage=engine_usage).raw)


def test_a_pools_cap_clamps_max_tokens() -> None:
    caps = TokenCaps(max_tokens=100, source="pool 'short'")
    shaped = _shape(chat_body(max_tokens=500), caps=caps)
    assert shaped.capped and orjson.loads(shaped.raw)["max_tokens"] == 100 and shaped.body["max_tokens"] == 100
    within = _shape(chat_body(max_tokens=50), caps=caps)
    assert not within.capped and orjson.loads(within.raw)["max_tokens"] == 50


def test_a_pools_cap_refuses_with_a_rejection_naming_max_tokens_and_the_pool() -> None:
    body = chat_body(max_tokens=500)
    plan = _plan(body, caps=TokenCaps(max_tokens=100, action="reject", source="pool 'short'"))
    refused = shape_body(orjson.dumps(body), body, False, plan)
    assert isinstance(refused, Rejection)
    assert refused.status == 400 and refused.param == "max_tokens" and refused.code == "max_tokens_above_limit"
    assert "pool 'short'.max_tokens" in refused.message


def test_a_pools_default_max_tokens_is_given_to_a_request_that_names_none() -> None:
    shaped = _shape(chat_body(), caps=TokenCaps(default_max_tokens=64, source="pool 'short'"))
    assert orjson.loads(shaped.raw)["max_tokens"] == 64


def test_the_answer_cache_applies_only_to_deterministic_bodies_of_tenants_that_store_answers() -> None:
    assert _shape(chat_body(temperature=0), answers=True).answer_cache is True
    assert _shape(chat_body(temperature=0.7), answers=True).answer_cache is False
    assert _shape(chat_body(), answers=True).answer_cache is False  # no temperature: the engine's default samples
    assert _shape(chat_body(temperature=0, n=2), answers=True).answer_cache is False
    assert _shape(chat_body(temperature=0), answers=False).answer_cache is False


def test_with_field_appends_a_field_before_the_closing_brace_and_keeps_the_rest() -> None:
    assert with_field(b'{"a": [1, {"b": 2}]} \r\n', b"c", b'"x"') == b'{"a": [1, {"b": 2}],"c":"x"}'
