"""A Responses API request as the chat policies read it, and the conversation the gateway keeps for it.

The Responses API states a prompt as ``instructions`` (the system text) and ``input`` (a string, or
items: messages with a role, function calls and their outputs). vLLM renders it with the chat
template exactly as a chat whose first message is the instructions, so the gateway's chat policies
apply as they are: ``rewrite_responses`` runs ``rewrite_chat`` over the instructions and the input
items seen as messages (an item keeps every field; only a message's text changes), and
``responses_messages`` is the conversation as the chat template renders it, for the prompt's pieces,
the length prediction and the replica choice.

Conversation state lives in the gateway, not in an engine (``previous_response_id``): each response
is kept as the input items its turn added and the output items it gave, with the ids of the turns before
it (``StoredResponse``), so a conversation of n turns is stored once, not n times over; the next turn is
sent as the whole conversation (``conversation_items`` of those turns, then ``continued``): history exactly
as the engine saw it, so its prefix is the prefix the engine cached for the turn before, whichever replica
serves it.
Instructions do not carry over from one response to the next (OpenAI's rule, and vLLM's).
Pure: bodies in, bodies out; the input is never mutated.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from policies.prompt.prompt import PromptPolicy, Rewrite, rewrite_chat
from policies.refusals import Rejection

OUTPUT_FIELD = "max_output_tokens"
_MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})


class StoredResponse(NamedTuple):
    """One response as the gateway keeps it: what continues it, and what ``GET`` answers."""

    input: list[Any]  # the input items its turn added (all it was sent, for the first turn of a conversation)
    output: list[Any]  # the output items it answered with
    response: dict[str, Any]  # the response object, as the client was answered
    earlier: tuple[str, ...] = ()  # the ids of the conversation's earlier turns, the first first


def conversation_items(turns: list[StoredResponse]) -> list[Any]:
    """The conversation ``turns`` (the first first) make: each turn's input items, then its output items."""
    return [item for turn in turns for item in (*turn.input, *turn.output)]


def input_items(value: Any) -> list[Any]:
    """``input`` as items: a string is one user message."""
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)


def is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type", "message") == "message" and item.get("role") in _MESSAGE_ROLES


def continued(body: dict[str, Any], earlier: list[Any]) -> dict[str, Any]:
    """The body of a turn that continues a conversation: its ``earlier`` items (``conversation_items``), then this
    turn's, as ``input``, without ``previous_response_id``, which no engine can resolve."""
    new_body = {key: value for key, value in body.items() if key != "previous_response_id"}
    new_body["input"] = [*earlier, *input_items(body["input"])]
    return new_body


def rewrite_responses(body: dict[str, Any], policy: PromptPolicy, history: int = 0) -> Rewrite:
    """``rewrite_chat`` over ``instructions`` and the input items after the first ``history`` (a
    continued conversation's earlier turns, already as the engine saw them, are left alone): canonical
    system text, volatile spans moved to the note on the last user input (a tool loop's turn, which has none,
    ends its tool output with it: ``_note_at_the_end``), the tenant's templates. A string input stays a string
    unless the note needs an item of its own."""
    instructions = body.get("instructions")
    head = [{"role": "system", "content": instructions}] if isinstance(instructions, str) and instructions else []
    value = body["input"]
    items = input_items(value)
    chat: dict[str, Any] = {"messages": [*head, *items[history:]]}
    if isinstance(body.get("tools"), list):
        chat["tools"] = body["tools"]
    rewrite = rewrite_chat(chat, policy)
    if not rewrite.changed:
        return Rewrite(body, False, rewrite.detected, rewrite.moved, rewrite.templated)
    new_body = {**body, **({"tools": rewrite.body["tools"]} if "tools" in chat else {})}
    messages = rewrite.body["messages"]
    if policy.note == "last_user" and len(messages) > len(chat["messages"]):  # no user input: a note of its own
        messages = messages[:-1]
        _note_at_the_end(messages, len(head), rewrite.body["messages"][-1]["content"])
    if head:
        new_body["instructions"] = messages[0]["content"]
    new_input = [*items[:history], *messages[len(head):]]
    single = isinstance(value, str) and len(new_input) == 1 and isinstance(new_input[0].get("content"), str)
    new_body["input"] = new_input[0]["content"] if single else new_input
    return Rewrite(new_body, True, rewrite.detected, rewrite.moved, rewrite.templated)


def _note_at_the_end(messages: list[Any], first: int, note: str) -> None:
    """A turn without user input (a tool loop's: the tool's output, then the model's next call) gets the note at
    its end without a system message after the conversation began, which templates that keep strict turns refuse:
    appended to the last tool output of the turn, else as a user message of its own."""
    for index in range(len(messages) - 1, first - 1, -1):
        item = messages[index]
        if isinstance(item, dict) and item.get("type") == "function_call_output" \
                and isinstance(item.get("output"), str):
            messages[index] = {**item, "output": f"{item['output']}\n\n{note}"}
            return
    messages.append({"role": "user", "content": note})


def with_input_messages(body: dict[str, Any], messages: list[Any], history: int = 0) -> dict[str, Any]:
    """``body`` with the input after ``history`` replaced by ``messages`` (retrieval's view of it,
    ``input_messages``, once it added its evidence): a string input stays a string when it can."""
    if isinstance(body["input"], str) and len(messages) == 1 and isinstance(messages[0].get("content"), str):
        return {**body, "input": messages[0]["content"]}
    return {**body, "input": [*input_items(body["input"])[:history], *messages]}


def input_messages(body: dict[str, Any], history: int = 0) -> dict[str, Any]:
    """This turn's input items as a chat body's ``messages`` (non-message items among them, which
    retrieval leaves alone), for ``question_of`` and ``with_evidence``."""
    return {"messages": input_items(body["input"])[history:]}


def responses_messages(body: dict[str, Any]) -> dict[str, Any]:
    """The conversation as vLLM renders it: a chat body (instructions first, function calls as an
    assistant's tool calls, their outputs as tool messages, the tools as chat tools) for the
    prompt's pieces and its tokens. Items the template never sees (reasoning) are left out."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for item in input_items(body["input"]):
        message = _as_message(item)
        if message is not None:
            messages.append(message)
    chat: dict[str, Any] = {"messages": messages}
    tools = [_as_chat_tool(tool) for tool in body.get("tools") or () if isinstance(tool, dict)]
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") == "none":
        chat["tool_choice"] = "none"
    return chat


def _as_message(item: Any) -> dict[str, Any] | None:
    if is_message(item):
        return {"role": item["role"], "content": item.get("content")}
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else ""
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": text}
    return None


def _as_chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function" or "function" in tool:
        return tool
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
    return {"type": "function", "function": function}


def stored_response(body: dict[str, Any], response: dict[str, Any], history_items: int = 0,
                    earlier: tuple[str, ...] = ()) -> StoredResponse | None:
    """What to keep of an answered turn (``body`` as the engine was sent it, its first ``history_items`` the
    turns ``earlier`` recalled): the items this turn added, and the earlier turns' ids. None unless the response
    finished (completed, or incomplete at its token cap) with output items."""
    output = response.get("output")
    if response.get("status") not in ("completed", "incomplete") or not isinstance(output, list):
        return None
    return StoredResponse(input_items(body["input"])[history_items:], output, response, earlier)


def conversation_too_long(items: int, limit: int) -> Rejection:
    """A ``previous_response_id`` whose conversation holds more items than a request may (``server.max_messages``)."""
    return Rejection(400, f"The conversation of 'previous_response_id' holds more than {limit} items "
                          f"({items} so far; server.max_messages): start a new one, or send the part that matters "
                          "as input.", param="previous_response_id", code="conversation_too_long")


def response_not_found(response_id: str, param: str | None = None) -> Rejection:
    """OpenAI's answer for an id this tenant has no response under: unknown, expired, deleted, or
    another tenant's (which must look the same)."""
    if param == "previous_response_id":
        return Rejection(404, f"Previous response with id '{response_id[:80]}' not found.", param=param,
                         code="previous_response_not_found")
    return Rejection(404, f"Response with id '{response_id[:80]}' not found.", param=param)
