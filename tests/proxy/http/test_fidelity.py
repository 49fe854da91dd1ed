"""Fidelity of a default gateway, field by field: what reaches the engine is what the app sent, but for the
changes the default rewrite names.

The named changes (and nothing else) are:
- ``cache_salt``: the tenant's salt, added or put in place of the client's (it only selects cached blocks);
- ``stream_usage``: ``stream_options.include_usage`` asked of the engine for a stream that did not ask, whose
  usage chunk the client never sees;
- ``system_text``: a system or developer message's text in canonical form, or without its volatile spans;
- ``volatile_note``: the spans moved out of system text, in one note after the last user turn.
Each named change counts only as the text it must give, written out by hand (``CANONICAL``, ``NOTES``).
Any other difference fails, named by its field: a reordered key or list anywhere in a tool, a schema or a
turn counts as one. The real engine's side of the same rule is in tests/integration/test_fidelity_engine.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from policies.prompt.prompt import NOTE_HEADER
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockUpstreams

Body = dict[str, Any]
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["reasoning", "answer"],
          "properties": {"reasoning": {"type": "string", "description": "think first"},
                         "answer": {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {}}}}}
TOOLS = [{"type": "function", "function": {"name": "zeta", "strict": True, "parameters": SCHEMA,
                                           "description": "the second by name, first as sent"}},
         {"function": {"name": "alpha", "parameters": {"type": "object", "properties": {}}}, "type": "function"}]
USER = {"role": "user", "content": "Where is my order?"}
TURNS = [
    {"role": "developer", "content": "Use the tools."},
    {"role": "user", "content": [{"type": "text", "text": "Look at this  "},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "zeta", "arguments": '{"reasoning": "r", "answer": {"zeta": 1}}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"b": 2, "a": 1}'},
    {"role": "user", "content": "Thanks.  \r\n"},
]

BILLING = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.f85; cc_entrypoint=sdk-cli;"}
ANTHROPIC_TURNS: Body = {
    "max_tokens": 9, "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "zeta", "description": "z", "input_schema": SCHEMA}], "tool_choice": {"type": "auto"},
    "thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}, "metadata": {"user_id": "u"},
    "stop_sequences": ["b", "a"], "temperature": 0.3, "top_k": 5,
    "messages": [
        {"role": "user", "content": "Look this up  "},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {
            "type": "tool_use", "id": "c1", "name": "zeta", "input": {"reasoning": "r", "answer": {"zeta": 1}}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": '{"b": 2, "a": 1}',
                                      "cache_control": {"type": "ephemeral"}}]},
    ],
}

CASES: list[tuple[str, str, Body, set[str]]] = [
    ("chat", "a user turn alone", {"messages": [USER]}, set()),
    ("chat", "structured output, reasoning first", {"messages": [USER], "response_format": {
        "type": "json_schema", "json_schema": {"name": "v", "strict": True, "schema": SCHEMA}}}, set()),
    ("chat", "json_object", {"messages": [USER], "response_format": {"type": "json_object"}}, set()),
    ("chat", "tools, forced", {"messages": [USER], "tools": TOOLS, "parallel_tool_calls": False,
                               "tool_choice": {"type": "function", "function": {"name": "zeta"}}}, set()),
    ("chat", "legacy functions", {"messages": [USER], "functions": [t["function"] for t in TOOLS],
                                  "function_call": {"name": "zeta"}}, set()),
    ("chat", "vLLM's guided fields", {"messages": [USER], "guided_json": SCHEMA, "guided_choice": ["b", "a"],
                                      "guided_regex": "[a-z]+", "structured_outputs": {"json": SCHEMA},
                                      "guided_decoding_backend": "xgrammar"}, set()),
    ("chat", "turns: developer, content parts, tool calls and results", {"messages": TURNS, "tools": TOOLS}, set()),
    ("chat", "sampling and its extras", {"messages": [USER], "seed": 3, "n": 2, "stop": ["b", "a"], "logprobs": True,
                                         "top_logprobs": 2, "logit_bias": {"9": 1, "1": -1}, "temperature": 0.3,
                                         "metadata": {"z": "1", "a": "2"}, "user": "u", "reasoning_effort": "low",
                                         "max_completion_tokens": 9, "chat_template_kwargs": {"b": 1, "a": 2}}, set()),
    ("chat", "a stream that asks for usage", {"messages": [USER], "stream": True,
                                              "stream_options": {"include_usage": True}}, set()),
    ("chat", "a stream that does not", {"messages": [USER], "stream": True}, {"stream_usage"}),
    ("chat", "the client's own cache salt", {"messages": [USER], "cache_salt": "mine"}, {"cache_salt"}),
    ("chat", "system text not canonical", {"messages": [
        {"role": "system", "content": "Caf\u0065\u0301: be brief.  \r\n\r\n\r\nOk"}, USER]}, {"system_text"}),
    ("chat", "a clock line in system text", {"messages": [
        {"role": "system", "content": "Be brief.\nCurrent time: 2026-11-26 09:14 UTC"}, USER]},
        {"system_text", "volatile_note"}),
    ("completions", "a prompt", {"prompt": "Current time: 2026-11-26 09:14 UTC\nSay hi", "logit_bias": {"2": 1},
                                 "guided_json": SCHEMA}, set()),
    ("embeddings", "texts", {"input": ["b", "a"], "encoding_format": "float", "dimensions": 8}, set()),
    ("messages", "Messages: tools, a tool use and its result, cache_control, thinking", ANTHROPIC_TURNS, set()),
    ("messages", "Messages: Claude Code's billing block", {
        "max_tokens": 9, "messages": [{"role": "user", "content": "Hi"}],
        "system": [BILLING, {"type": "text", "text": "Be brief."}]}, {"billing_block"}),
]
# What each named change must read, written out by hand: the system text as canonical (NFC, \n, no trailing
# blanks, one blank line at most) or without its moved line, and the note after the last user turn.
CANONICAL = {"Caf\u0065\u0301: be brief.  \r\n\r\n\r\nOk": "Caf\u00e9: be brief.\n\nOk",
             "Be brief.\nCurrent time: 2026-11-26 09:14 UTC": "Be brief."}
NOTES = {"Be brief.\nCurrent time: 2026-11-26 09:14 UTC": "Current time: 2026-11-26 09:14 UTC"}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "embeddings": "/v1/embeddings",
         "messages": "/v1/messages"}


def changes(sent: Body, forwarded: Body) -> set[str]:
    """The changes ``forwarded`` makes to ``sent``, named; anything unnamed as ``changed <field>``."""
    named: set[str] = set()
    if forwarded.get("cache_salt") != sent.get("cache_salt"):
        named.add("cache_salt")
    if forwarded.get("stream_options") != sent.get("stream_options"):
        asked = {**(sent.get("stream_options") or {}), "include_usage": True}
        named.add("stream_usage" if forwarded.get("stream_options") == asked else "changed stream_options")
    if "messages" in sent:
        named |= _message_changes(sent["messages"], forwarded["messages"])
    if isinstance(sent.get("system"), list) and BILLING in sent["system"] \
            and forwarded.get("system") == [block for block in sent["system"] if block != BILLING]:
        named.add("billing_block")
        sent = {**sent, "system": forwarded["system"]}
    for key in {*sent, *forwarded} - {"cache_salt", "stream_options", "messages"}:
        if key not in sent or key not in forwarded or orjson.dumps(sent[key]) != orjson.dumps(forwarded[key]):
            named.add(f"changed {key}")
    return named


def _message_changes(sent: list[Body], forwarded: list[Body]) -> set[str]:
    named: set[str] = set()
    last_user = max(i for i, message in enumerate(sent) if message["role"] == "user")
    if len(forwarded) != len(sent):
        return {"changed messages"}
    system = [m["content"] for m in sent if m["role"] in ("system", "developer") and isinstance(m["content"], str)]
    note = "\n".join(NOTES[text] for text in system if text in NOTES)
    for index, (before, after) in enumerate(zip(sent, forwarded, strict=True)):
        if orjson.dumps(before) == orjson.dumps(after):
            continue
        rest_alike = orjson.dumps({**before, "content": None}) == orjson.dumps({**after, "content": None})
        if before["role"] in ("system", "developer") and rest_alike and \
                after["content"] == CANONICAL.get(before["content"]):
            named.add("system_text")
        elif index == last_user and rest_alike and note and \
                after["content"] == f"{before['content']}\n\n{NOTE_HEADER}\n{note}":
            named.add("volatile_note")
        else:
            named.add(f"changed messages[{index}]")
    return named


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Any:
    upstreams = MockUpstreams(MockEngine())
    with in_memory_gateway({"pools": [pool("p", "http://engine-1/v1", models=["m"], health={"interval": 0})]},
                           upstreams, FakeClock(), Path(tmp_path_factory.mktemp("fidelity"))) as client:
        yield client, upstreams


@pytest.mark.parametrize(("endpoint", "case", "body", "named"), CASES, ids=[case[1] for case in CASES])
def test_a_default_gateway_changes_only_what_its_rewrite_names(gateway: Any, endpoint: str, case: str, body: Body,
                                                               named: set[str]) -> None:
    client, upstreams = gateway
    sent = {"model": "m", **body}
    answer = client.post(PATHS[endpoint], content=orjson.dumps(sent), headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    forwarded = orjson.loads(upstreams.posts()[-1].body)
    salted = set() if endpoint == "embeddings" else {"cache_salt"}
    assert changes(sent, forwarded) == named | salted
