"""The Anthropic Messages API's request fields and what each must be (``validate_request`` reads the table).

Checked as vLLM's own Messages serving reads them (``AnthropicMessagesRequest``), so what it would refuse with
a 400 is refused here with the field's path before any other work: roles (``system`` among them, as Claude
Code sends one inside ``messages``), typed content blocks, text system blocks, tools with a name and an
``input_schema``, and a ``max_tokens`` the engine requires. Fields the engine reads further (``thinking``,
``output_config``, ``context_management``, ``metadata``) pass as sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.request.field_checks import (
    Invalid,
    content_parts,
    int_at_least,
    non_empty_string,
    number_between,
    of_type,
    role_messages,
    typed_object,
    typed_objects,
    wrong_type,
)

MESSAGE_ROLES = frozenset({"user", "assistant", "system"})


def _messages(param: str, value: Any) -> None:
    for where, message in role_messages(param, value, MESSAGE_ROLES):
        content = message.get("content")
        if content is None:
            raise Invalid(f"{where}.content", f"Missing required parameter: '{where}.content'.")
        if not isinstance(content, str):
            content_parts(f"{where}.content", content)


def _system(param: str, value: Any) -> None:
    """A string, or text blocks."""
    if isinstance(value, str):
        return
    for where, block in typed_objects(param, value, "a string or an array"):
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise wrong_type(f"{where}.text", "a string", block.get("text"))


def _tools(param: str, value: Any) -> None:
    """Client tools (a name and an ``input_schema``); server tools name a ``type`` instead of a schema."""
    if not isinstance(value, list):
        raise wrong_type(param, "an array", value)
    for index, tool in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(tool, dict):
            raise wrong_type(where, "an object", tool)
        if not isinstance(tool.get("name"), str):
            raise wrong_type(f"{where}.name", "a string", tool.get("name"))
        schema = tool.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise wrong_type(f"{where}.input_schema", "an object", schema)


def _stop_sequences(param: str, value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise wrong_type(param, "an array of strings", value)


_COMMON: dict[str, Callable[[str, Any], None]] = {
    "messages": _messages,
    "system": _system,
    "tools": _tools,
    "tool_choice": typed_object,
    "thinking": of_type(dict, "an object"),
    "output_config": of_type(dict, "an object"),
}

MESSAGES_FIELDS: dict[str, Callable[[str, Any], None]] = {
    **_COMMON,
    "max_tokens": int_at_least(1),
    "stream": of_type(bool, "a boolean"),
    "stop_sequences": _stop_sequences,
    "temperature": number_between(0, None),
    "top_p": number_between(0, 1),
    "top_k": int_at_least(0),
    "metadata": of_type(dict, "an object"),
    "cache_salt": non_empty_string,  # vLLM's prefix-cache salt; prefixgate may derive it per tenant
}

COUNT_TOKENS_FIELDS: dict[str, Callable[[str, Any], None]] = _COMMON
