"""Fidelity on the real engine: the same request at temperature 0, through prefixgate and straight to vLLM.

A request the default rewrite leaves alone must reach the engine as the same prompt tokens and come back
as the same answer. A request it does rewrite may change only what the rewrite names: system text made
canonical, volatile spans moved to the note. Each such case says what the engine should see, written out
by hand, and that body, sent straight to vLLM, must give the prompt tokens and the answer prefixgate got.
vLLM reports the prompt it rendered (``return_token_ids``), so a change the rewrite does not name shows
as a token difference even where the tiny model's junk answer happened not to move.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.embedded import Embedded

pytestmark = pytest.mark.engine

Body = dict[str, Any]

# "reasoning" sorts after "answer": a gateway that sorted keys would make the model answer first.
REASONING_FIRST = {
    "type": "object", "additionalProperties": False, "required": ["reasoning", "answer", "detail"],
    "properties": {
        "reasoning": {"type": "string", "pattern": "^[a-z ]{1,16}$"},
        "answer": {"type": "string", "pattern": "^[a-z ]{1,8}$"},
        "detail": {"type": "object", "additionalProperties": False, "required": ["zeta", "alpha"],
                   "properties": {"zeta": {"type": "boolean"}, "alpha": {"type": "boolean"}}},
    },
}
TOOLS = [
    {"type": "function", "function": {"name": "zeta_lookup", "description": "Find an order.",
                                      "parameters": REASONING_FIRST}},
    {"type": "function", "function": {"name": "alpha_cancel", "parameters": {
        "type": "object", "properties": {"why": {"type": "string"}, "id": {"type": "string"}}}}},
]
USER = {"role": "user", "content": "Where is order 7731? Explain first."}


def ask(origin: str, body: Body) -> Body:
    answer = httpx.post(origin + "/v1/chat/completions", json={**body, "return_token_ids": True}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def side_by_side(embedded: Embedded, body: Body, engine_sees: Body | None = None) -> tuple[Body, Body]:
    """(through prefixgate, straight to vLLM): ``body`` through the gateway, ``engine_sees`` (default: the
    same body) to the engine; the prompt tokens vLLM rendered must be the same."""
    body = {"model": embedded.model, "max_tokens": 120, "temperature": 0, **body}
    through = ask(embedded.proxy, body)
    direct = ask(embedded.engine, {"model": embedded.model, "max_tokens": 120, "temperature": 0,
                                   **(engine_sees or body)})
    assert through["prompt_token_ids"] == direct["prompt_token_ids"]
    return through["choices"][0], direct["choices"][0]


def test_structured_output_writes_its_fields_in_the_schemas_order(embedded: Embedded) -> None:
    format_ = {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": REASONING_FIRST}}
    through, direct = side_by_side(embedded, {"messages": [USER], "response_format": format_})
    assert through["message"]["content"] == direct["message"]["content"]
    written = json.loads(through["message"]["content"])
    assert list(written) == ["reasoning", "answer", "detail"]
    assert list(written["detail"]) == ["zeta", "alpha"]


def test_a_forced_tool_call_writes_its_arguments_in_the_parameters_order(embedded: Embedded) -> None:
    choice = {"type": "function", "function": {"name": "zeta_lookup"}}
    through, direct = side_by_side(embedded, {"messages": [USER], "tools": TOOLS, "tool_choice": choice})
    (call,) = through["message"]["tool_calls"]
    assert call["function"]["name"] == "zeta_lookup"
    assert call["function"]["arguments"] == direct["message"]["tool_calls"][0]["function"]["arguments"]
    arguments = json.loads(call["function"]["arguments"])
    assert list(arguments) == ["reasoning", "answer", "detail"]
    assert list(arguments["detail"]) == ["zeta", "alpha"]


def test_a_streamed_structured_answer_is_the_engines(embedded: Embedded) -> None:
    format_ = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": REASONING_FIRST}}
    body = {"model": embedded.model, "max_tokens": 120, "temperature": 0, "stream": True,
            "messages": [USER], "response_format": format_}

    def streamed(origin: str) -> tuple[str, bool]:
        """The streamed text, and whether a usage chunk came (how vLLM groups tokens into chunks varies)."""
        text, usage = "", False
        with httpx.stream("POST", origin + "/v1/chat/completions", json=body, timeout=120) as answer:
            for line in answer.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    usage = usage or not chunk["choices"]
                    text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
        return text, usage

    through, direct = streamed(embedded.proxy), streamed(embedded.engine)
    assert through == direct  # the usage chunk prefixgate asks for is its own, not the client's
    assert list(json.loads(through[0])) == ["reasoning", "answer", "detail"]


@dataclass(frozen=True)
class Case:
    """A request, and what the default rewrite may change in it: ``engine_sees`` is that, written out."""

    name: str
    body: Body
    may_change: str = "nothing"
    engine_sees: Body | None = None


CONVERSATION = [
    {"role": "system", "content": "You route support tickets.\nReply with one word."},
    {"role": "user", "content": "My parcel is late."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "zeta_lookup", "arguments": '{"reasoning": "x"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "in transit", "eta": "2026-11-27"}'},
    {"role": "user", "content": [{"type": "text", "text": "And now?"}, {"type": "text", "text": " Be short."}]},
]
NOT_CANONICAL = "Cafe\u0301 rules  \r\n\r\n\r\n\r\nAnswer briefly.\t"
WITH_CLOCK = "You plan deliveries.\nCurrent time: 2026-11-26 09:14:02 UTC\nrequest_id=9f1c2b7a44d0\nBe exact."
CASES = [
    Case("tools in the app's order, chosen freely", {"messages": [USER], "tools": TOOLS, "tool_choice": "auto"}),
    Case("tools present, none to call", {"messages": [USER], "tools": TOOLS, "tool_choice": "none"}),
    Case("a conversation with tool calls and content parts", {"messages": CONVERSATION, "tools": TOOLS}),
    Case("sampling fields", {"messages": [USER], "seed": 7, "logprobs": True, "top_logprobs": 2, "stop": ["zz"],
                             "frequency_penalty": 0.5, "logit_bias": {"926": -50}}),
    Case("vLLM's structured outputs", {"messages": [USER], "structured_outputs": {"choice": ["ship", "hold"]}}),
    Case("system text made canonical", {"messages": [{"role": "system", "content": NOT_CANONICAL}, USER]},
         "system text in canonical form",
         {"messages": [{"role": "system", "content": "Caf\u00e9 rules\n\nAnswer briefly."}, USER]}),
    Case("volatile spans moved to the note", {"messages": [{"role": "system", "content": WITH_CLOCK}, USER]},
         "the clock and ID lines, moved after the last user turn",
         {"messages": [{"role": "system", "content": "You plan deliveries.\nBe exact."},
                       {"role": "user", "content": USER["content"] + "\n\n[Request context from earlier in the "
                        "prompt]\nCurrent time: 2026-11-26 09:14:02 UTC\nrequest_id=9f1c2b7a44d0"}]}),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_default_rewrite_changes_only_what_it_names(embedded: Embedded, case: Case) -> None:
    engine_sees = {"model": embedded.model, "max_tokens": 120, "temperature": 0, **case.body,
                   **(case.engine_sees or {})}
    through, direct = side_by_side(embedded, case.body, engine_sees)
    assert _without_call_ids(through) == _without_call_ids(direct), f"may change: {case.may_change}"


def _without_call_ids(choice: Body) -> Body:
    """A choice as compared: vLLM gives each tool call a fresh id."""
    calls = [{**call, "id": None} for call in choice["message"].get("tool_calls") or []]
    return {**choice, "message": {**choice["message"], "tool_calls": calls}}
