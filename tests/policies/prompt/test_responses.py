"""The Responses API as the policies read it: the rewrite of this turn's instructions and input (history
left as the engine saw it), the conversation a continued turn is sent as, the chat the template renders,
what is kept of an answer, and the checks a request is put to."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from policies.prompt.prompt import NOTE_HEADER, PromptPolicy
from policies.prompt.responses import (
    StoredResponse,
    continued,
    conversation_items,
    response_not_found,
    responses_messages,
    rewrite_responses,
    stored_response,
)
from policies.refusals import Rejection
from policies.request.types import RequestView
from policies.request.validate import validate_request

INSTRUCTIONS = "You are a planner.  \r\nCurrent time: 2026-11-22 11:51:13 UTC\r\n\r\n\r\nPlan well."
CANONICAL = "You are a planner.\n\nPlan well."
NOTE = f"{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC"
TOOLS = [  # neither by name nor with sorted keys: the order a grammar and the template read
    {"type": "function", "name": "zeta", "parameters": {"type": "object", "properties": {
        "z": {"type": "string"}, "a": {"type": "integer"}}}, "description": "Last."},
    {"type": "function", "name": "alpha", "description": "First.", "parameters": {"type": "object"}},
]
TEXT = {"format": {"type": "json_schema", "name": "plan", "schema": {"type": "object", "properties": {
    "reasoning": {"type": "string"}, "answer": {"type": "string"}}}}}


def responses(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "instructions": INSTRUCTIONS, "input": "Plan my day.", **fields}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


# ---- the rewrite -------------------------------------------------------------------------------------------


def test_instructions_become_canonical_and_the_clock_moves_to_a_string_inputs_tail() -> None:
    body = responses()
    rewrite = rewrite_responses(body, PromptPolicy())
    assert (rewrite.changed, rewrite.detected, rewrite.moved) == (True, 1, 1)
    assert rewrite.body["instructions"] == CANONICAL
    assert rewrite.body["input"] == f"Plan my day.\n\n{NOTE}"  # a string input stays a string
    assert body == responses()  # the request is never changed in place


def test_a_list_inputs_note_is_an_input_text_part_of_its_last_user_message() -> None:
    items = [user("Earlier question."), assistant("Earlier answer."), user("Plan my day.")]
    rewrite = rewrite_responses(responses(input=items), PromptPolicy())
    assert rewrite.body["instructions"] == CANONICAL
    first, answer, last = rewrite.body["input"]
    assert first == items[0] and answer == items[1]
    assert last == {**items[2], "content": [{"type": "input_text", "text": "Plan my day."},
                                            {"type": "input_text", "text": NOTE}]}


def test_a_developer_message_in_the_input_is_system_text_too() -> None:
    items = [{"role": "developer", "content": "Be brief.\ntrace_id=4bf92f3577b34da6a3ce929d0e0e4736"},
             {"role": "user", "content": "Plan my day."}]
    rewrite = rewrite_responses({"model": "m", "input": items}, PromptPolicy())
    assert "instructions" not in rewrite.body
    assert rewrite.body["input"] == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": f"Plan my day.\n\n{NOTE_HEADER}\ntrace_id=4bf92f3577b34da6a3ce929d0e0e4736"}]


def test_an_agents_environment_items_date_ends_that_item_in_every_turn_of_its_session() -> None:
    """Codex resends its whole conversation each turn (``store: false``), its ``<environment_context>`` (with
    today's date) a user item before the first prompt: the note ends that item, the same in every turn, so each
    turn's prompt starts with the one before's; at the last user item it would move with each turn."""
    environment = user("<environment_context>\n  <cwd>/home/user/project</cwd>\n"
                       "  <current_date>2026-11-28</current_date>\n</environment_context>")
    developer = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]}
    first = [developer, environment, user("Add a multiply function.")]
    rewrite = rewrite_responses({"model": "m", "input": first}, PromptPolicy()).body["input"]
    dated = rewrite[1]["content"]
    assert "2026-11-28" not in dated[0]["text"]
    assert dated[1] == {"type": "input_text", "text": f"{NOTE_HEADER}\n[ref 1] = 2026-11-28"}
    assert rewrite[2] == first[2]
    later = [*first, assistant("Done."), user("Add a docstring.")]
    again = rewrite_responses({"model": "m", "input": later}, PromptPolicy()).body["input"]
    assert again[:3] == rewrite and again[3:] == later[3:]


def test_history_items_are_left_exactly_as_the_engine_saw_them() -> None:
    """A continued turn: its first ``history`` items were sent before (with their note) and stay byte for
    byte, even system text with a clock in it; only the new input is rewritten."""
    history = [{"role": "developer", "content": "Old rules.  \nCurrent time: 2026-11-21 09:00:00 UTC"},
               user(f"Earlier question.\n\n{NOTE_HEADER}\nCurrent time: 2026-11-21 09:00:00 UTC"),
               assistant("Earlier answer."),
               {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}]
    body = responses(input=[*copy.deepcopy(history), user("And tomorrow?")])
    rewrite = rewrite_responses(body, PromptPolicy(), history=len(history))
    assert rewrite.body["input"][:4] == history
    assert orjson.dumps(rewrite.body["input"][:4]) == orjson.dumps(history)
    assert rewrite.body["input"][4]["content"][-1] == {"type": "input_text", "text": NOTE}
    assert rewrite.body["instructions"] == CANONICAL


def test_tools_and_the_text_format_are_never_reordered() -> None:
    body = responses(tools=copy.deepcopy(TOOLS), text=copy.deepcopy(TEXT), tool_choice="auto")
    rewrite = rewrite_responses(body, PromptPolicy())
    assert rewrite.changed  # the instructions changed; the tools and schema did not
    assert orjson.dumps(rewrite.body["tools"]) == orjson.dumps(TOOLS)
    assert orjson.dumps(rewrite.body["text"]) == orjson.dumps(TEXT)
    assert list(rewrite.body) == list(body)  # the body's own keys keep their order too


def test_a_body_with_nothing_to_rewrite_is_the_same_object() -> None:
    body = {"model": "m", "instructions": "Plan well.", "input": "Plan my day.", "tools": copy.deepcopy(TOOLS)}
    rewrite = rewrite_responses(body, PromptPolicy())
    assert rewrite.body is body and not rewrite.changed and rewrite.detected == 0


def test_a_policy_that_keeps_volatile_spans_leaves_them_in_the_instructions() -> None:
    rewrite = rewrite_responses(responses(), PromptPolicy(volatile="keep"))
    assert rewrite.body["instructions"] == ("You are a planner.\nCurrent time: 2026-11-22 11:51:13 UTC\n\n"
                                            "Plan well.")
    assert rewrite.body["input"] == "Plan my day." and rewrite.moved == 0 and rewrite.detected == 1


# ---- continued conversations -------------------------------------------------------------------------------


def test_a_continued_turn_is_sent_as_the_whole_conversation_without_the_previous_id() -> None:
    previous = StoredResponse(input=[{"role": "user", "content": "First."}], output=[assistant("One.")],
                              response={"id": "resp_1"})
    body = {"model": "m", "previous_response_id": "resp_1", "input": "Second.", "instructions": "Be brief.",
            "max_output_tokens": 9}
    sent = continued(body, conversation_items([previous]))
    assert "previous_response_id" not in sent
    assert sent["input"] == [{"role": "user", "content": "First."}, assistant("One."),
                             {"role": "user", "content": "Second."}]
    assert {key: sent[key] for key in ("model", "instructions", "max_output_tokens")} == {
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 9}
    assert body["previous_response_id"] == "resp_1" and body["input"] == "Second."  # not mutated


def test_a_continued_turns_list_input_follows_the_previous_output() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
    previous = StoredResponse(input=[user("Look it up.")], output=[call], response={"id": "resp_1"})
    result = {"type": "function_call_output", "call_id": "c1", "output": "42"}
    body = {"model": "m", "previous_response_id": "resp_1", "input": [result]}
    sent = continued(body, conversation_items([previous]))
    assert sent["input"] == [user("Look it up."), call, result]


def test_a_stored_turn_keeps_only_what_it_added_and_the_ids_before_it() -> None:
    """A conversation of n turns is stored once: each turn its own input and output items, linked to the turns
    before; the history they make is the input the engine was sent."""
    first = stored_response({"input": "First."}, {"id": "resp_1", "status": "completed", "output": [assistant("1")]})
    assert first is not None and first.earlier == () and first.input == [{"role": "user", "content": "First."}]
    sent = continued({"input": "Second.", "previous_response_id": "resp_1"}, conversation_items([first]))
    second = stored_response(sent, {"id": "resp_2", "status": "completed", "output": [assistant("2")]},
                             history_items=2, earlier=("resp_1",))
    assert second is not None and second.input == [{"role": "user", "content": "Second."}]
    assert second.earlier == ("resp_1",)
    assert conversation_items([first, second]) == [*sent["input"], assistant("2")]


# ---- the conversation as the template renders it -----------------------------------------------------------


def test_the_rendered_conversation_maps_function_calls_and_their_outputs() -> None:
    body = {"model": "m", "instructions": "Be brief.", "tool_choice": "none", "tools": copy.deepcopy(TOOLS),
            "input": [
                user("Look it up."),
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                assistant("It is 42."),
            ]}
    chat = responses_messages(body)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Look it up."}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": assistant("It is 42.")["content"]},
    ]
    assert [tool["function"]["name"] for tool in chat["tools"]] == ["zeta", "alpha"]
    assert chat["tools"][0] == {"type": "function", "function": {
        "name": "zeta", "description": "Last.", "parameters": TOOLS[0]["parameters"]}}
    assert chat["tool_choice"] == "none"


def test_a_string_input_without_instructions_is_one_user_message() -> None:
    assert responses_messages({"model": "m", "input": "Hi."}) == {"messages": [{"role": "user", "content": "Hi."}]}


# ---- what is kept of an answer -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "incomplete"])
def test_a_finished_response_is_kept_with_the_input_it_was_sent(status: str) -> None:
    body = {"model": "m", "input": "Hi."}
    response = {"id": "resp_1", "status": status, "output": [assistant("Hello.")]}
    assert stored_response(body, response) == StoredResponse([{"role": "user", "content": "Hi."}],
                                                             [assistant("Hello.")], response)


@pytest.mark.parametrize("response", [
    {"id": "resp_1", "status": "failed", "output": []},
    {"id": "resp_1", "status": "in_progress", "output": []},
    {"id": "resp_1", "status": "cancelled", "output": []},
    {"id": "resp_1", "status": "completed"},
    {"id": "resp_1", "status": "completed", "output": "Hello."},
], ids=["failed", "in progress", "cancelled", "no output", "output not a list"])
def test_an_unfinished_response_is_not_kept(response: dict[str, Any]) -> None:
    assert stored_response({"model": "m", "input": "Hi."}, response) is None


def test_an_unknown_previous_id_is_openais_404_naming_the_field() -> None:
    refused = response_not_found("resp_gone", "previous_response_id")
    assert (refused.status, refused.param, refused.code) == (404, "previous_response_id", "previous_response_not_found")
    assert "resp_gone" in refused.message
    plain = response_not_found("resp_gone")
    assert (plain.status, plain.param, plain.code) == (404, None, None)
    assert plain.message == "Response with id 'resp_gone' not found."


# ---- validation --------------------------------------------------------------------------------------------


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "Hi.", **fields}


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m"}, "input"),
    ({"input": "Hi."}, "model"),
    (request(input=5), "input"),
    (request(input={"role": "user", "content": "Hi."}), "input"),
    (request(input=[{"role": "user", "content": "Hi."}, "Hi."]), "input[1]"),
    (request(input=[{"role": "user", "content": "Hi."}, {"content": "Hi."}]), "input[1].role"),
    (request(input=[{"type": "message", "content": "Hi."}]), "input[0].role"),
    (request(input=[{"role": "bot", "content": "Hi."}]), "input[0].role"),
    (request(input=[{"role": "tool", "content": "Hi."}]), "input[0].role"),
    (request(input=[{"role": 1, "content": "Hi."}]), "input[0].role"),
    (request(input=[{"role": "user", "content": 5}]), "input[0].content"),
    (request(input=[{"role": "user"}]), "input[0].content"),
    (request(input=[{"role": "user", "content": ["Hi."]}]), "input[0].content[0]"),
    (request(input=[{"role": "user", "content": [{"text": "Hi."}]}]), "input[0].content[0].type"),
    (request(input=[{"type": 3, "call_id": "c1"}]), "input[0].type"),
    (request(instructions=["Be brief."]), "instructions"),
    (request(max_output_tokens=0), "max_output_tokens"),
    (request(max_output_tokens=-1), "max_output_tokens"),
    (request(max_output_tokens="10"), "max_output_tokens"),
    (request(max_output_tokens=True), "max_output_tokens"),
    (request(max_output_tokens=2.5), "max_output_tokens"),
    (request(background=True), "background"),
    (request(background="no"), "background"),
    (request(stream="yes"), "stream"),
    (request(store="no"), "store"),
    (request(temperature=-1), "temperature"),
    (request(top_p=2), "top_p"),
    (request(tools={"type": "function"}), "tools"),
    (request(tools=["lookup"]), "tools[0]"),
    (request(tools=[{"name": "lookup"}]), "tools[0].type"),
    (request(tools=[{"type": "function", "name": 7}]), "tools[0].name"),
    (request(tool_choice=3), "tool_choice"),
    (request(text="json"), "text"),
    (request(text={"format": {"type": 1}}), "text.format.type"),
    (request(previous_response_id=""), "previous_response_id"),
    (request(previous_response_id=5), "previous_response_id"),
    (request(metadata=[]), "metadata"),
])
def test_responses_rejections_name_the_exact_param(body: dict[str, Any], param: str) -> None:
    result = validate_request("responses", body)
    assert isinstance(result, Rejection), result
    assert result.status == 400 and result.param == param
    assert f"'{param}'" in result.message


def test_a_missing_input_is_a_missing_required_parameter() -> None:
    result = validate_request("responses", {"model": "m", "messages": [{"role": "user", "content": "Hi."}]})
    assert isinstance(result, Rejection)
    assert (result.param, result.code) == ("input", "missing_required_parameter")


def test_background_responses_are_refused_with_a_reason() -> None:
    result = validate_request("responses", request(background=True))
    assert isinstance(result, Rejection) and "Background responses are not supported" in result.message
    assert isinstance(validate_request("responses", request(background=False)), RequestView)


@pytest.mark.parametrize("body", [
    request(),
    request(input=""),
    request(input=[user("Hi."), assistant("Hello."),
                   {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c1", "output": "42"},
                   {"type": "reasoning", "id": "rs_1", "summary": []},
                   {"role": "system", "content": "Be brief."}, {"role": "developer", "content": "Be kind."}]),
    request(instructions="Be brief.", max_output_tokens=1, temperature=0, top_p=1, store=False, stream=True,
            tools=[*copy.deepcopy(TOOLS), {"type": "web_search_preview"}],
            tool_choice={"type": "function", "name": "zeta"},
            text=copy.deepcopy(TEXT), previous_response_id="resp_1", metadata={"k": "v"}, user="u",
            parallel_tool_calls=False, cache_salt="s", top_k=5),
], ids=["string", "empty string", "items", "every field"])
def test_valid_responses_bodies_pass(body: dict[str, Any]) -> None:
    view = validate_request("responses", body)
    assert isinstance(view, RequestView), view
    assert view.endpoint == "responses" and view.model == "m"
    assert view.stream is (body.get("stream") is True) and view.include_usage is False


# A chat template that keeps strict turns (as Llama 2's and Mistral's first ones do): a system message only first,
# and after it user turns, each answered (a tool result counts as the user's side).
STRICT_TEMPLATE = """
{%- set turns = messages[1:] if messages[0]['role'] == 'system' else messages -%}
{%- for message in turns -%}
  {%- if message['role'] == 'system' -%}{{ raise_exception('a system message after the conversation began') }}
  {%- endif -%}
  {%- set theirs = message['role'] in ('user', 'tool') -%}
  {%- if theirs != (loop.index0 % 2 == 0) -%}{{ raise_exception('roles must alternate') }}{%- endif -%}
  [{{ message['role'] }}] {{ message['content'] }}
{% endfor -%}
"""


def _render_strictly(body: dict[str, Any]) -> str:
    from jinja2 import Environment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    template = Environment().from_string(STRICT_TEMPLATE)
    return template.render(messages=responses_messages(body)["messages"], raise_exception=raise_exception)


def test_a_tool_loop_turns_note_ends_the_tool_output_not_a_system_message_after_it() -> None:
    """A continued turn whose input is only a tool's output has no user message for the note: it ends that output,
    so the conversation still renders with templates that allow a system message only first, and the item kept
    for the next turn is the one the engine saw. Sent whole, the conversation's last user message takes it."""
    call = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
    result = {"type": "function_call_output", "call_id": "c1", "output": "42"}
    items = [user("Look it up."), call, result]
    rewrite = rewrite_responses(responses(input=items), PromptPolicy(), history=2)
    sent = rewrite.body["input"]
    assert sent[:2] == items[:2] and sent[2:] == [{**result, "output": f"42\n\n{NOTE}"}]
    assert rewrite.body["instructions"] == CANONICAL
    assert _render_strictly(rewrite.body).rstrip().endswith(NOTE)
    with pytest.raises(ValueError, match="system message after"):  # what a trailing system note did
        _render_strictly({**rewrite.body, "input": [*items, {"role": "system", "content": NOTE}]})
    whole = rewrite_responses(responses(input=items), PromptPolicy())
    assert whole.body["input"][0]["content"][-1]["text"] == NOTE and whole.body["input"][1:] == items[1:]
    assert _render_strictly(whole.body)
    no_output = rewrite_responses(responses(input=[user("Hi."), assistant("Hello.")]), PromptPolicy(), 1)
    assert no_output.body["input"][-1] == {"role": "user", "content": NOTE}
