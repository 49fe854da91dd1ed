"""A Responses conversation's tokens as the gateway computes them for routing (``responses_messages``, then
``PromptTokens``) are the engine's own: the count the real engine reports for the same request, for each
kind of input item. Where they differ, ``balance: kv_events`` would look for blocks no engine holds."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from policies.prompt.messages import messages_conversation
from policies.prompt.responses import responses_messages
from proxy.kv_events.prompt_tokens import PromptTokens
from tests.support.embedded import Embedded

pytestmark = pytest.mark.engine

TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather now.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
ANSWER = {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
          "content": [{"type": "output_text", "text": "Hello! How can I help?", "annotations": []}]}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}',
        "id": "fc_1", "status": "completed"}

CASES: dict[str, dict[str, Any]] = {
    "a string": {"input": "Hello there"},
    "instructions": {"instructions": "Be terse.\nAlways.", "input": "Hello there"},
    "history with an answer": {"instructions": "Be terse.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}, ANSWER,
        {"role": "user", "content": "Weather?"}]},
    "tools": {"input": "Weather in Paris?", "tools": TOOLS},
    "a tool round trip": {"tools": TOOLS, "input": [
        {"role": "user", "content": "Weather in Paris?"}, CALL,
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]},
    "a developer message first": {"input": [{"role": "developer", "content": "Answer in French."},
                                            {"role": "user", "content": "Hi"}]},
    "a developer message later": {"instructions": "Be nice.", "input": [
        {"role": "user", "content": "Hi"}, {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Hi again"}]},
}


@pytest.fixture(scope="module")
def tokens(embedded: Embedded) -> PromptTokens:
    return PromptTokens(str(embedded.model_folder))


def engine_answer(embedded: Embedded, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The engine's own answer to ``body`` at ``path``, whose usage is the token count to match."""
    answer = httpx.post(embedded.engine + path, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


@pytest.mark.parametrize("case", CASES)
def test_a_responses_conversation_has_the_engines_own_token_count(embedded: Embedded, tokens: PromptTokens,
                                                                   case: str) -> None:
    body = {"model": embedded.model, "max_output_tokens": 1, **CASES[case]}
    rendered = tokens.of_body(responses_messages(body))
    assert rendered is not None
    assert len(rendered) == engine_answer(embedded, "/v1/responses", body)["usage"]["input_tokens"]


def test_a_chat_developer_message_is_rendered_as_the_engine_renders_it(embedded: Embedded,
                                                                       tokens: PromptTokens) -> None:
    """vLLM sends a template without a developer role its developer messages as system ones."""
    messages = [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi"},
                {"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi again"}]
    body = {"model": embedded.model, "messages": messages, "max_tokens": 1}
    assert len(tokens.of_chat(messages)) == engine_answer(embedded, "/v1/chat/completions", body)["usage"][
        "prompt_tokens"]


MESSAGES_CASES: dict[str, dict[str, Any]] = {
    # Claude Code's first user turn: harness reminders, then the prompt, as parts (the tiny model's template loops
    # over them, so vLLM hands it the list, which it joins with nothing)
    "a user turn of several text parts": {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nToday is Sunday.\n</system-reminder>"},
        {"type": "text", "text": "Add a multiply function."}]}]},
    # Claude Code defers some tools' schemas; vLLM renders the flag, and strict where set
    "tools, one deferred": {"system": "Agent.", "messages": [{"role": "user", "content": "Hi"}], "tools": [
        {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}},
        {"name": "WebFetch", "description": "Fetch a page.", "input_schema": {"type": "object"},
         "defer_loading": True},
        {"name": "Edit", "description": "Edit a file.", "input_schema": {"type": "object"}, "strict": True}]},
}


@pytest.mark.parametrize("case", MESSAGES_CASES)
def test_a_messages_conversation_has_the_engines_own_token_count(embedded: Embedded, tokens: PromptTokens,
                                                                  case: str) -> None:
    body = {"model": embedded.model, "max_tokens": 1, **MESSAGES_CASES[case]}
    rendered = tokens.of_body(messages_conversation(body))
    assert rendered is not None
    assert len(rendered) == engine_answer(embedded, "/v1/messages/count_tokens", body)["input_tokens"]
