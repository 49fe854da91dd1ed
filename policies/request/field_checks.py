"""The checks a request field is put to, each naming the exact JSON path in its message: the
building blocks of ``validate_request``'s per-endpoint field tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

TYPE_NAMES = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


class Invalid(Exception):
    """A field that fails its check: its path and OpenAI's message for it."""

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        self.message = message


def describe(value: Any) -> str:
    return TYPE_NAMES.get(type(value), type(value).__name__)


def wrong_type(param: str, expected: str, value: Any) -> Invalid:
    return Invalid(param, f"Invalid type for '{param}': expected {expected}, but got {describe(value)} instead.")


def is_int(value: Any) -> bool:
    return type(value) is int  # bool is an int subclass; JSON true is not a count


def is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def int_at_least(minimum: int) -> Callable[[str, Any], None]:
    def check(param: str, value: Any) -> None:
        if not is_int(value):
            raise wrong_type(param, "an integer", value)
        if value < minimum:
            raise Invalid(
                param,
                f"Invalid '{param}': integer below minimum value. "
                f"Expected a value >= {minimum}, but got {value} instead.",
            )

    return check


def number_between(low: float | None, high: float | None) -> Callable[[str, Any], None]:
    def check(param: str, value: Any) -> None:
        if not is_number(value):
            raise wrong_type(param, "a number", value)
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f">= {low}"
            raise Invalid(param, f"Invalid '{param}': expected a value {bounds}, but got {value} instead.")

    return check


def of_type(kind: type, expected: str) -> Callable[[str, Any], None]:
    def check(param: str, value: Any) -> None:
        if type(value) is not kind:
            raise wrong_type(param, expected, value)

    return check


def non_empty_string(param: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise wrong_type(param, "a non-empty string", value)


def string_or_object(param: str, value: Any) -> None:
    if not isinstance(value, str | dict):
        raise wrong_type(param, "a string or an object", value)


def typed_object(param: str, value: Any) -> None:
    """An object that names its ``type`` (chat's ``response_format``, the Messages API's ``tool_choice``)."""
    if not isinstance(value, dict):
        raise wrong_type(param, "an object", value)
    if not isinstance(value.get("type"), str):
        raise wrong_type(f"{param}.type", "a string", value.get("type"))


response_format = typed_object


def typed_objects(param: str, value: Any, expected: str = "an array") -> Iterator[tuple[str, dict[str, Any]]]:
    """Each item of an array of objects that name their ``type`` (tools, content parts), with its path."""
    if not isinstance(value, list):
        raise wrong_type(param, expected, value)
    for index, item in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(item, dict):
            raise wrong_type(where, "an object", item)
        if not isinstance(item.get("type"), str):
            raise wrong_type(f"{where}.type", "a string", item.get("type"))
        yield where, item


def role_messages(param: str, value: Any, roles: frozenset[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each message of a non-empty array, with its path, once its role is checked to be one of ``roles``."""
    if not isinstance(value, list):
        raise wrong_type(param, "an array", value)
    if not value:
        raise Invalid(param, f"Invalid '{param}': empty array. Expected an array with minimum length 1.")
    for index, message in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(message, dict):
            raise wrong_type(where, "an object", message)
        role = message.get("role")
        if not isinstance(role, str):
            raise wrong_type(f"{where}.role", "a string", role)
        if role not in roles:
            raise Invalid(f"{where}.role", f"Invalid value for '{where}.role': '{role[:40]}'. "
                                            f"Supported values are: {', '.join(sorted(roles))}.")
        yield where, message


def content_parts(param: str, value: Any) -> None:
    """A message's content that is not a string: an array of typed parts."""
    for _ in typed_objects(param, value, "a string or an array"):
        pass
