"""Hypothesis strategies for OpenAI request bodies, valid and broken, as the raw bytes a client sends.

Shared by the fuzz tests (tests/proxy/http/test_fuzz.py, 1,000 cases) and the long fuzz run
(tests/bench/fuzz.py, 10,000+). Valid bodies must get 200; every body must get 2xx or 4xx in
OpenAI's error form: never 5xx, never a hang.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

MODEL = "fake-model"


def dumps(value: Any) -> bytes:
    """JSON bytes (the standard library's: unlike orjson it writes integers past 64 bits)."""
    return json.dumps(value, ensure_ascii=False).encode()


ROLES = ("system", "user", "assistant", "developer")
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")

text = st.text(max_size=80)
json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | text
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(text, inner, max_size=4), max_leaves=12)

message = st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": text})
tool = st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({
    "name": st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    "parameters": st.just({"type": "object", "properties": {"q": {"type": "string"}}})})})

valid_chat = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": st.lists(message, min_size=1, max_size=6)},
    optional={
        "max_tokens": st.integers(1, 8),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "stream": st.booleans(),
        "stop": text | st.lists(text, max_size=3),
        "seed": st.integers(0, 2**31),
        "user": text,
        "tools": st.lists(tool, max_size=3),
        "n": st.just(1),
    },
)
valid_completion = st.fixed_dictionaries(
    {"model": st.just(MODEL), "prompt": text | st.lists(text, min_size=1, max_size=3)},
    optional={"max_tokens": st.integers(1, 8), "stream": st.booleans(), "echo": st.booleans()},
)
valid_embedding = st.fixed_dictionaries({"model": st.just(MODEL), "input": text | st.lists(text, min_size=1,
                                                                                          max_size=4)})
# The Responses API: a string or items (messages with text or input_text parts, function calls and their
# outputs), flat function tools; never previous_response_id (a fresh gateway holds no conversation)
input_part = st.fixed_dictionaries({"type": st.just("input_text"), "text": text})
input_message = st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": text | st.lists(
    input_part, min_size=1, max_size=3)}, optional={"type": st.just("message")})
call_id = st.from_regex(r"call_[a-z0-9]{1,8}", fullmatch=True)
function_call = st.fixed_dictionaries({"type": st.just("function_call"), "call_id": call_id,
                                       "name": st.from_regex(r"[a-z_]{1,12}", fullmatch=True), "arguments": text})
function_output = st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": call_id,
                                         "output": text})
flat_tool = st.fixed_dictionaries({"type": st.just("function"), "name": st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
                                   "parameters": st.just({"type": "object", "properties": {"q": {"type": "string"}}})})
valid_responses = st.fixed_dictionaries(
    {"model": st.just(MODEL),
     "input": text | st.lists(input_message | function_call | function_output, min_size=1, max_size=6)},
    optional={
        "instructions": text,
        "max_output_tokens": st.integers(1, 8),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "stream": st.booleans(),
        "store": st.booleans(),
        "tools": st.lists(flat_tool, max_size=3),
        "tool_choice": st.sampled_from(("auto", "none")),
        "text": st.just({"format": {"type": "text"}}),
        "user": text,
        "metadata": st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), text, max_size=3),
    },
)
VALID = {"/v1/chat/completions": valid_chat, "/v1/completions": valid_completion, "/v1/embeddings": valid_embedding,
         "/v1/responses": valid_responses}


@st.composite
def valid_request(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(ENDPOINTS))
    return path, dumps(draw(VALID[path]))


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A valid body with one field replaced by any JSON value, removed, or added."""
    path = draw(st.sampled_from(ENDPOINTS))
    body: dict[str, Any] = dict(draw(VALID[path]))
    how = draw(st.sampled_from(("replace", "remove", "add")))
    key = draw(st.sampled_from(sorted(body))) if how != "add" else draw(st.sampled_from(
        ("max_tokens", "temperature", "stream", "stream_options", "n", "tools", "tool_choice", "stop",
         "response_format", "logit_bias", "cache_salt", "logprobs", "top_logprobs", "messages", "prompt",
         "input", "instructions", "max_output_tokens", "previous_response_id", "background", "store", "text")))
    if how == "remove":
        body.pop(key)
    else:
        body[key] = draw(json_values)
    return dumps(body)


@st.composite
def _odd_messages(draw: st.DrawFn) -> bytes:
    """Chat messages with unknown roles, wrong content types, odd parts."""
    weird = st.fixed_dictionaries({}, optional={
        "role": text | json_scalars, "content": json_values,
        "name": json_scalars, "tool_calls": json_values})
    return dumps({"model": MODEL, "messages": draw(st.lists(weird | message, min_size=0, max_size=5)),
                         "max_tokens": draw(st.integers(-5, 8))})


@st.composite
def _odd_input(draw: st.DrawFn) -> bytes:
    """Responses input items of every type with any fields (calls without names, outputs that are not
    text), items with unknown roles and types, wrong content; tools with odd fields."""
    typed = st.fixed_dictionaries(
        {"type": st.sampled_from(("function_call", "function_call_output", "reasoning", "message", "item_reference"))},
        optional={"call_id": json_values, "name": json_values, "arguments": json_values, "output": json_values,
                  "content": json_values, "id": json_values})
    untyped = st.fixed_dictionaries({}, optional={
        "type": text | json_scalars, "role": st.sampled_from(ROLES) | text | json_scalars, "content": json_values})
    items = draw(st.lists(typed | untyped | input_message | function_call, min_size=0, max_size=5))
    body: dict[str, Any] = {"model": MODEL, "input": items, "max_output_tokens": draw(st.integers(-5, 8))}
    if draw(st.booleans()):
        body["tools"] = draw(st.lists(st.fixed_dictionaries({}, optional={
            "type": st.just("function") | json_scalars, "name": json_scalars, "parameters": json_values,
            "function": json_values}), max_size=3))
    return dumps(body)


@st.composite
def _deep(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(60, 3000))
    nested = b"[" * depth + b"1" + b"]" * depth
    return b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "extra": ' + nested + b"}"


@st.composite
def _huge(draw: st.DrawFn) -> bytes:
    size = draw(st.sampled_from((1_000_001, 2_000_000, 5_000_000)))
    where = draw(st.sampled_from(("content", "model", "key")))
    big = "x" * size
    if where == "content":
        return dumps({"model": MODEL, "messages": [{"role": "user", "content": big}]})
    if where == "model":
        return dumps({"model": big, "messages": [{"role": "user", "content": "hi"}]})
    return dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], big: 1})


@st.composite
def _many_messages(draw: st.DrawFn) -> bytes:
    count = draw(st.integers(2049, 6000))
    return dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}] * count})


@st.composite
def _raw_bytes(draw: st.DrawFn) -> bytes:
    """Not JSON, not UTF-8, not an object, or cut short."""
    valid = dumps(draw(valid_chat))
    return draw(st.sampled_from((
        b"", b"null", b"[]", b'"text"', b"{", b'{"model": "\xff\xfe", "messages": []}',
        valid[: max(1, len(valid) // 2)], valid.replace(b'"', b"'"), valid + b"garbage",
        b'{"model": "fake-model", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',
    )) | st.binary(max_size=200))


@st.composite
def broken_request(draw: st.DrawFn) -> tuple[str, bytes]:
    odd_input = _odd_input().map(lambda body: ("/v1/responses", body))
    anywhere = st.tuples(st.sampled_from(ENDPOINTS), st.one_of(
        _mutated(), _odd_messages(), _deep(), _huge(), _many_messages(), _raw_bytes(), json_values.map(dumps)))
    return draw(st.one_of(anywhere, anywhere, anywhere, odd_input))


def is_openai_error(payload: Any) -> bool:
    error = payload.get("error") if isinstance(payload, dict) else None
    return (isinstance(error, dict) and isinstance(error.get("message"), str) and bool(error["message"])
            and isinstance(error.get("type"), str))
