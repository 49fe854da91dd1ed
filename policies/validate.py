"""Shape checks for OpenAI request bodies: a 400 that names the field instead of an upstream 500.

Only fields whose type the proxy or vLLM depends on are checked; unknown fields pass through
untouched because vLLM accepts many extras (``ignore_eos``, ``cache_salt``, ``top_k`` ...).
Written by hand rather than with a schema library: it runs on every request, a full OpenAI
schema would reject vLLM's extras, and the messages must name the exact JSON path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.types import Endpoint, Rejection, RequestView

CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

_TYPE_NAMES = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


class _Invalid(Exception):
    def __init__(self, param: str, message: str) -> None:
        self.param = param
        self.message = message


def _describe(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _wrong_type(param: str, expected: str, value: Any) -> _Invalid:
    return _Invalid(param, f"Invalid type for '{param}': expected {expected}, but got {_describe(value)} instead.")


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool is an int subclass; JSON true is not a count


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _int_at_least(minimum: int) -> Callable[[str, Any], None]:
    def check(param: str, value: Any) -> None:
        if not _is_int(value):
            raise _wrong_type(param, "an integer", value)
        if value < minimum:
            raise _Invalid(
                param,
                f"Invalid '{param}': integer below minimum value. "
                f"Expected a value >= {minimum}, but got {value} instead.",
            )

    return check


def _number_between(low: float | None, high: float | None) -> Callable[[str, Any], None]:
    def check(param: str, value: Any) -> None:
        if not _is_number(value):
            raise _wrong_type(param, "a number", value)
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f">= {low}"
            raise _Invalid(param, f"Invalid '{param}': expected a value {bounds}, but got {value} instead.")

    return check


def _of_type(kind: type, expected: str) -> Callable[[str, Any], None]:
    def check(param: str, value: Any) -> None:
        if type(value) is not kind:
            raise _wrong_type(param, expected, value)

    return check


def _not_streamed(param: str, value: Any) -> None:
    """Embeddings come whole: OpenAI's API has no stream of them, and a stream flag let through would
    make the gateway answer with SSE framing around a vector, or wait for events that never come."""
    if type(value) is not bool:
        raise _wrong_type(param, "a boolean", value)
    if value:
        raise _Invalid(param, f"Embeddings do not stream: '{param}' must be false or left out.")


def _non_empty_string(param: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise _wrong_type(param, "a non-empty string", value)


def _stop(param: str, value: Any) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _wrong_type(param, "a string or an array of strings", value)


def _string_or_object(param: str, value: Any) -> None:
    if not isinstance(value, str | dict):
        raise _wrong_type(param, "a string or an object", value)


def _stream_options(param: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise _wrong_type(param, "an object", value)
    include = value.get("include_usage")
    if include is not None and type(include) is not bool:
        raise _wrong_type(f"{param}.include_usage", "a boolean", include)


def _tools(param: str, value: Any) -> None:
    if not isinstance(value, list):
        raise _wrong_type(param, "an array", value)
    for index, tool in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(tool, dict):
            raise _wrong_type(where, "an object", tool)
        if not isinstance(tool.get("type"), str):
            raise _wrong_type(f"{where}.type", "a string", tool.get("type"))
        function = tool.get("function")
        if function is not None:
            if not isinstance(function, dict):
                raise _wrong_type(f"{where}.function", "an object", function)
            if not isinstance(function.get("name"), str):
                raise _wrong_type(f"{where}.function.name", "a string", function.get("name"))


def _response_format(param: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise _wrong_type(param, "an object", value)
    if not isinstance(value.get("type"), str):
        raise _wrong_type(f"{param}.type", "a string", value.get("type"))


def _prompt_like(param: str, value: Any) -> None:
    """str | list[str] | list[int] | list[list[int]], non-empty: what OpenAI accepts for prompt/input."""
    if isinstance(value, str):
        return
    expected = "a string, an array of strings, or an array of token ids"
    if not isinstance(value, list):
        raise _wrong_type(param, expected, value)
    if not value:
        raise _Invalid(param, f"Invalid '{param}': expected a non-empty array.")
    first = value[0]
    if isinstance(first, str):
        ok = all(isinstance(item, str) for item in value)
    elif _is_int(first):
        ok = all(_is_int(item) for item in value)
    elif isinstance(first, list):
        ok = all(isinstance(item, list) and all(_is_int(t) for t in item) for item in value)
    else:
        ok = False
    if not ok:
        raise _wrong_type(param, expected, value)


def _messages(param: str, value: Any) -> None:
    if not isinstance(value, list):
        raise _wrong_type(param, "an array", value)
    if not value:
        raise _Invalid(param, f"Invalid '{param}': empty array. Expected an array with minimum length 1.")
    for index, message in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(message, dict):
            raise _wrong_type(where, "an object", message)
        role = message.get("role")
        if not isinstance(role, str):
            raise _wrong_type(f"{where}.role", "a string", role)
        if role not in CHAT_ROLES:
            raise _Invalid(
                f"{where}.role",
                f"Invalid value for '{where}.role': '{role[:40]}'. "
                f"Supported values are: {', '.join(sorted(CHAT_ROLES))}.",
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            if not isinstance(content, list):
                raise _wrong_type(f"{where}.content", "a string or an array", content)
            for part_index, part in enumerate(content):
                part_where = f"{where}.content[{part_index}]"
                if not isinstance(part, dict):
                    raise _wrong_type(part_where, "an object", part)
                if not isinstance(part.get("type"), str):
                    raise _wrong_type(f"{part_where}.type", "a string", part.get("type"))
        name = message.get("name")
        if name is not None and not isinstance(name, str):
            raise _wrong_type(f"{where}.name", "a string", name)
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise _wrong_type(f"{where}.tool_calls", "an array", tool_calls)


_SAMPLING_FIELDS: dict[str, Callable[[str, Any], None]] = {
    "stream": _of_type(bool, "a boolean"),
    "stream_options": _stream_options,
    "n": _int_at_least(1),
    "temperature": _number_between(0, None),
    "top_p": _number_between(0, 1),
    "presence_penalty": _number_between(-2, 2),
    "frequency_penalty": _number_between(-2, 2),
    "seed": _of_type(int, "an integer"),
    "stop": _stop,
    "user": _of_type(str, "a string"),
    "logit_bias": _of_type(dict, "an object"),
    "cache_salt": _non_empty_string,  # vLLM's prefix-cache salt; prefixgate may derive it per tenant
}

_CHAT_FIELDS: dict[str, Callable[[str, Any], None]] = {
    **_SAMPLING_FIELDS,
    "messages": _messages,
    "max_tokens": _int_at_least(1),
    "max_completion_tokens": _int_at_least(1),
    "logprobs": _of_type(bool, "a boolean"),
    "top_logprobs": _int_at_least(0),
    "tools": _tools,
    "tool_choice": _string_or_object,
    "response_format": _response_format,
    "parallel_tool_calls": _of_type(bool, "a boolean"),
}

_COMPLETION_FIELDS: dict[str, Callable[[str, Any], None]] = {
    **_SAMPLING_FIELDS,
    "prompt": _prompt_like,
    "max_tokens": _int_at_least(0),  # 0 with echo=true is how eval harnesses score prompts
    "logprobs": _int_at_least(0),
    "echo": _of_type(bool, "a boolean"),
    "best_of": _int_at_least(1),
    "suffix": _of_type(str, "a string"),
}

_EMBEDDING_FIELDS: dict[str, Callable[[str, Any], None]] = {
    "input": _prompt_like,
    "stream": _not_streamed,
    "encoding_format": _of_type(str, "a string"),
    "dimensions": _int_at_least(1),
    "user": _of_type(str, "a string"),
}

_FIELDS: dict[Endpoint, dict[str, Callable[[str, Any], None]]] = {
    "chat": _CHAT_FIELDS,
    "completions": _COMPLETION_FIELDS,
    "embeddings": _EMBEDDING_FIELDS,
}

_REQUIRED: dict[Endpoint, tuple[str, ...]] = {
    "chat": ("model", "messages"),
    "completions": ("model", "prompt"),
    "embeddings": ("model", "input"),
}


def validate_request(endpoint: Endpoint, body: Any) -> RequestView | Rejection:
    """Check a decoded JSON body for ``endpoint``; return what the proxy needs, or why it is refused."""
    if not isinstance(body, dict):
        return Rejection(400, f"Invalid request body: expected a JSON object, but got {_describe(body)}.")
    for name in _REQUIRED[endpoint]:
        if body.get(name) is None:
            return Rejection(
                400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
            )
    model = body["model"]
    if not isinstance(model, str) or not model:
        return Rejection(400, _wrong_type("model", "a non-empty string", model).message, param="model")
    checks = _FIELDS[endpoint]
    try:
        for name, value in body.items():
            check = checks.get(name)
            if check is not None and value is not None:
                check(name, value)
    except _Invalid as invalid:
        return Rejection(400, invalid.message, param=invalid.param)
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    return RequestView(endpoint, model, stream, include_usage, body)
