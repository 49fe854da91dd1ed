"""An Anthropic Messages request as the chat policies read it, and as vLLM renders it.

The Messages API states a prompt as ``system`` (a string or text blocks) and ``messages`` whose content is a
string or typed blocks (text, image, tool_use, tool_result, thinking), with tools as a name, a description
and an ``input_schema``. vLLM serves it by turning it into a chat (``to_chat_completion_request``): the system
blocks joined into one system message, less the ``x-anthropic-billing-header`` block Claude Code sends (a hash
that changes with every prompt), tool uses as tool calls, tool results as tool messages before the user
message that carried them, thinking as the assistant's reasoning, tools as functions.

``rewrite_messages`` runs ``rewrite_chat`` over the system text and the turns seen as chat messages (a
block keeps every field, ``cache_control`` included; only a text block's text changes), so canonical
system text, volatile spans moved to the note, tenant templates and the harness's own context blocks
(``<system-reminder>``) are the chat rules, and drops the billing block, which vLLM drops before rendering
(so no engine's output can change by it, and no engine that keeps it loses its prefix to it).
``messages_conversation`` is the chat vLLM renders, for the prompt's pieces, the length prediction and the
replica choice (a KV-events pool renders it with the model's chat template).
Pure: bodies in, bodies out; the input is never mutated.
"""

from __future__ import annotations

import json
from typing import Any

from policies.prompt.message_text import is_text_part
from policies.prompt.prompt import PromptPolicy, Rewrite, rewrite_chat

BILLING_HEADER = "x-anthropic-billing-header"


def _is_billing(block: Any) -> bool:
    return is_text_part(block) and block["text"].startswith(BILLING_HEADER)


def without_billing(body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``body`` less the billing blocks vLLM drops (in ``system``'s blocks, and in system-role messages), and
    how many there were."""
    dropped = 0
    new_body = body
    system = body.get("system")
    if isinstance(system, list) and any(_is_billing(block) for block in system):
        kept = [block for block in system if not _is_billing(block)]
        dropped += len(system) - len(kept)
        new_body = {**body, "system": kept}
    messages = body["messages"]
    if any(message.get("role") == "system" and _has_billing(message.get("content")) for message in messages):
        new_messages = []
        for message in messages:
            content = message.get("content")
            if message.get("role") != "system" or not _has_billing(content):
                new_messages.append(message)
            elif isinstance(content, list):
                kept = [block for block in content if not _is_billing(block)]
                dropped += len(content) - len(kept)
                if kept:
                    new_messages.append({**message, "content": kept})
            else:
                dropped += 1  # a string that is the billing header: vLLM renders no message for it
        new_body = {**new_body, "messages": new_messages}
    return new_body, dropped


def _has_billing(content: Any) -> bool:
    if isinstance(content, str):
        return content.startswith(BILLING_HEADER)
    return isinstance(content, list) and any(_is_billing(block) for block in content)


def rewrite_messages(body: dict[str, Any], policy: PromptPolicy) -> Rewrite:
    """The billing blocks dropped, then ``rewrite_chat`` over ``system`` and ``messages``: canonical system
    text, volatile spans moved to the note (``system``'s at the end of the last user message; a later message's,
    such as Claude Code's environment block, at the end of the user turn before it, where it stays from one turn
    to the next), the tenant's templates. A string stays a string."""
    body, dropped = without_billing(body)
    system = body.get("system")
    head = [{"role": "system", "content": system}] if isinstance(system, str | list) and system else []
    chat: dict[str, Any] = {"messages": [*head, *body["messages"]]}
    if isinstance(body.get("tools"), list):
        chat["tools"] = body["tools"]
    rewrite = rewrite_chat(chat, policy)
    if not rewrite.changed:
        return Rewrite(body, dropped > 0, rewrite.detected, rewrite.moved, rewrite.templated)
    messages = rewrite.body["messages"]
    if len(messages) > len(chat["messages"]):  # the note as a system message of its own
        note = messages[-1]["content"]
        messages = messages[:-1]
        _note_on_last_user(messages, len(head), note)
    new_body = {**body, "messages": messages[len(head):]}
    if head:
        new_body["system"] = _with_edges(system, messages[0]["content"])
    if "tools" in chat:
        new_body["tools"] = rewrite.body["tools"]
    return Rewrite(new_body, True, rewrite.detected, rewrite.moved, rewrite.templated)


def _with_edges(sent: Any, canonical: Any) -> Any:
    """System blocks made canonical one by one, each with the line breaks it began and ended with: vLLM joins
    the blocks with nothing between them, so a break the canonical form strips at a block's edge would join
    two blocks' words."""
    if not isinstance(sent, list) or not isinstance(canonical, list):
        return canonical
    blocks = []
    for before, after in zip(sent, canonical, strict=True):
        if is_text_part(before) and is_text_part(after) and before["text"] != after["text"]:
            text = before["text"]
            lead, trail = len(text) - len(text.lstrip("\n")), len(text) - len(text.rstrip("\n"))
            if text.strip("\n"):
                after = {**after, "text": "\n" * lead + after["text"] + "\n" * trail}
        blocks.append(after)
    return blocks


def _note_on_last_user(messages: list[Any], first: int, note: str) -> None:
    """The note at the end of the last user message (after its tool results), else a user message of its own."""
    for index in range(len(messages) - 1, first - 1, -1):
        message = messages[index]
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                messages[index] = {**message, "content": [*content, {"type": "text", "text": note}]}
            else:
                messages[index] = {**message, "content": f"{content or ''}\n\n{note}"}
            return
    messages.append({"role": "user", "content": note})


def messages_conversation(body: dict[str, Any]) -> dict[str, Any]:
    """The chat vLLM renders for a Messages ``body`` (its ``to_chat_completion_request``, for templates that
    take system messages anywhere): ``messages`` and ``tools``, for the prompt's pieces and replica choice."""
    conversation: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        conversation.append({"role": "system", "content": system})
    elif isinstance(system, list):
        text = "".join(block["text"] for block in system if is_text_part(block) and block["text"]
                       and not _is_billing(block))
        if text:
            conversation.append({"role": "system", "content": text})
    for message in body["messages"]:
        _append_turn(message, conversation)
    chat: dict[str, Any] = {"messages": conversation}
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        chat["tools"] = [_as_chat_tool(tool) for tool in tools if isinstance(tool, dict)]
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "none":
            chat["tool_choice"] = "none"
    return chat


def _append_turn(message: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
    role, content = message.get("role"), message.get("content")
    if role == "system":
        text = content if isinstance(content, str) else "".join(
            block["text"] for block in content or () if is_text_part(block) and not _is_billing(block))
        if text and not (isinstance(content, str) and content.startswith(BILLING_HEADER)):
            conversation.append({"role": "system", "content": text})
        return
    if isinstance(content, str):
        conversation.append({"role": role, "content": content})
        return
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in content or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": ""}})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif kind == "tool_use":
            calls.append({"id": block.get("id") or "", "type": "function", "function": {
                "name": block.get("name") or "", "arguments": json.dumps(block.get("input") or {})}})
        elif kind == "tool_result":
            if role == "user":
                conversation.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "",
                                     "content": _result_text(block.get("content"))})
            else:
                parts.append({"type": "text", "text": f"Tool result: {block.get('content') or ''}"})
    turn: dict[str, Any] = {"role": role}
    if reasoning:
        turn["reasoning"] = "".join(reasoning)
    if calls:
        turn["tool_calls"] = calls
    if parts:
        turn["content"] = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts
    if parts or calls or reasoning or role != "user":
        conversation.append(turn)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(item.get("text", "") for item in content if isinstance(item, dict)
                         and item.get("type") == "text")
    return ""


def _as_chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Messages tool as vLLM hands it to the template: ``strict`` and ``defer_loading`` (Claude Code defers some
    tools) only where set, as its serializer leaves them out otherwise."""
    function = {"name": tool.get("name"), "description": tool.get("description"),
                "parameters": tool.get("input_schema")}
    for key in ("strict", "defer_loading"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}
