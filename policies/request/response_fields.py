"""The Responses API's request fields and what each must be (``validate_request`` reads the table)."""

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
    response_format,
    string_or_object,
    typed_objects,
    wrong_type,
)

RESPONSE_ROLES = frozenset({"system", "developer", "user", "assistant"})



def _response_input(param: str, value: Any) -> None:
    """A string, or items: messages (a role and content) and typed items (function calls, their
    outputs...), which vLLM checks further."""
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        raise wrong_type(param, "a string or an array", value)
    for index, item in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(item, dict):
            raise wrong_type(where, "an object", item)
        kind = item.get("type")
        if kind is not None and not isinstance(kind, str):
            raise wrong_type(f"{where}.type", "a string", kind)
        role = item.get("role")
        if role is None and kind in (None, "message"):
            raise Invalid(f"{where}.role", f"Missing required parameter: '{where}.role'.")
        if role is not None:
            if not isinstance(role, str):
                raise wrong_type(f"{where}.role", "a string", role)
            if role not in RESPONSE_ROLES:
                raise Invalid(f"{where}.role", f"Invalid value for '{where}.role': '{role[:40]}'. "
                                                f"Supported values are: {', '.join(sorted(RESPONSE_ROLES))}.")
            content = item.get("content")
            if not isinstance(content, str):
                content_parts(f"{where}.content", content)


def _response_tools(param: str, value: Any) -> None:
    """Flat function tools (``name`` and ``parameters`` beside ``type``) and built-in ones."""
    for where, tool in typed_objects(param, value):
        if tool["type"] == "function" and not isinstance(tool.get("name"), str):
            raise wrong_type(f"{where}.name", "a string", tool.get("name"))


def _text_config(param: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise wrong_type(param, "an object", value)
    format_ = value.get("format")
    if format_ is not None:
        response_format(f"{param}.format", format_)


def _not_in_background(param: str, value: Any) -> None:
    """A background response runs on after its request and is fetched from the engine that ran it:
    state only one engine holds, which the gateway does not keep."""
    if type(value) is not bool:
        raise wrong_type(param, "a boolean", value)
    if value:
        raise Invalid(param, f"Background responses are not supported: '{param}' must be false or left out.")


RESPONSES_FIELDS: dict[str, Callable[[str, Any], None]] = {
    "input": _response_input,
    "instructions": of_type(str, "a string"),
    "stream": of_type(bool, "a boolean"),
    "max_output_tokens": int_at_least(1),
    "temperature": number_between(0, None),
    "top_p": number_between(0, 1),
    "tools": _response_tools,
    "tool_choice": string_or_object,
    "parallel_tool_calls": of_type(bool, "a boolean"),
    "text": _text_config,
    "previous_response_id": non_empty_string,
    "store": of_type(bool, "a boolean"),
    "background": _not_in_background,
    "metadata": of_type(dict, "an object"),
    "user": of_type(str, "a string"),
    "cache_salt": non_empty_string,
}
