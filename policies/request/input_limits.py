"""Limits on the shape of one request body, checked before any other work on it.

The body-size cap bounds bytes; these bound what a body of allowed size can still make expensive:
nesting (every walk over it, and the engine's own parser), the number of messages (every per-message
loop of the rewrite, the prefix meter and the engine's chat template), and the text of one message
or prompt (the line scanner's work). Each refusal is a 400 that names the limit and its setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.refusals import Rejection
from policies.request.types import Endpoint


@dataclass(frozen=True, slots=True)
class InputLimits:
    max_json_depth: int = 64
    max_messages: int = 2048
    max_content_chars: int = 1_000_000
    max_inputs: int = 2048  # prompts of a completions request, or inputs of an embeddings request


def check_input_limits(endpoint: Endpoint, raw: bytes, body: Any, limits: InputLimits) -> Rejection | None:
    """Why the decoded ``body`` (from ``raw``) breaks a limit, or None."""
    # A body with fewer brackets than the depth limit cannot nest that deep: skips the walk for most.
    if raw.count(b"[") + raw.count(b"{") > limits.max_json_depth and _deeper_than(body, limits.max_json_depth):
        return Rejection(400, f"The request body nests JSON deeper than {limits.max_json_depth} levels "
                              "(server.max_json_depth).", code="json_too_deep")
    if not isinstance(body, dict):
        return None  # validation names what is wrong with it
    if endpoint == "chat":
        return _check_messages(body.get("messages"), limits)
    if endpoint in ("messages", "count_tokens"):
        return _check_system(body.get("system"), limits) or _check_messages(body.get("messages"), limits)
    if endpoint == "responses":
        return _check_responses(body, limits)
    field = "prompt" if endpoint == "completions" else "input"
    return _check_prompts(field, body.get(field), limits)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether containers nest more than ``limit`` levels, walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, (dict, list)))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


def _check_messages(messages: Any, limits: InputLimits) -> Rejection | None:
    if not isinstance(messages, list):
        return None
    if len(messages) > limits.max_messages:
        return Rejection(400, f"'messages' has {len(messages)} messages; at most {limits.max_messages} are "
                              "accepted (server.max_messages).", param="messages", code="too_many_messages")
    for index, message in enumerate(messages):
        if isinstance(message, dict):
            size = _text_chars(message.get("content"))
            if size > limits.max_content_chars:
                return _too_long(f"messages[{index}].content", size, limits)
    return None


def _check_system(system: Any, limits: InputLimits) -> Rejection | None:
    """The Messages API's ``system`` (a string or text blocks), by a message's measure."""
    size = _text_chars(system)
    return _too_long("system", size, limits) if size > limits.max_content_chars else None


def _check_prompts(field: str, value: Any, limits: InputLimits) -> Rejection | None:
    if isinstance(value, str):
        return _too_long(field, len(value), limits) if len(value) > limits.max_content_chars else None
    if not isinstance(value, list):
        return None
    if len(value) > limits.max_inputs:
        return Rejection(400, f"'{field}' has {len(value)} items; at most {limits.max_inputs} are accepted "
                              "(server.max_inputs).", param=field, code="too_many_inputs")
    for index, item in enumerate(value):
        if isinstance(item, str) and len(item) > limits.max_content_chars:
            return _too_long(f"{field}[{index}]", len(item), limits)
    return None


# The text an item of a Responses ``input`` carries to the engine: a message's content (a string or parts), a tool
# call's arguments, a tool's output (a string, or parts in newer clients).
_ITEM_TEXT_FIELDS = ("content", "arguments", "output")


def _check_responses(body: dict[str, Any], limits: InputLimits) -> Rejection | None:
    """The Responses API by chat's measures: its input items count as messages, and ``instructions`` and each
    item's text (wherever the item carries it) as a message's content."""
    instructions = body.get("instructions")
    if isinstance(instructions, str) and len(instructions) > limits.max_content_chars:
        return _too_long("instructions", len(instructions), limits)
    items = body.get("input")
    if not isinstance(items, list):
        return _check_prompts("input", items, limits)
    if len(items) > limits.max_messages:  # a conversation's items, as chat's messages
        return Rejection(400, f"'input' has {len(items)} items; at most {limits.max_messages} are accepted "
                              "(server.max_messages).", param="input", code="too_many_messages")
    for index, item in enumerate(items):
        if isinstance(item, str) and len(item) > limits.max_content_chars:
            return _too_long(f"input[{index}]", len(item), limits)
        if isinstance(item, dict):
            for name in _ITEM_TEXT_FIELDS:
                size = _text_chars(item.get(name))
                if size > limits.max_content_chars:
                    return _too_long(f"input[{index}].{name}", size, limits)
    return None


def _text_chars(content: Any) -> int:
    """Characters of a message's text: the string, or the text of its parts."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part["text"]) for part in content
                   if isinstance(part, dict) and isinstance(part.get("text"), str))
    return 0


def _too_long(param: str, size: int, limits: InputLimits) -> Rejection:
    return Rejection(400, f"'{param}' is {size} characters long; at most {limits.max_content_chars} are accepted "
                          "(server.max_content_chars).", param=param, code="content_too_long")
