"""Shape checks for OpenAI request bodies: a 400 that names the field instead of an upstream 500.

Only fields whose type the proxy or vLLM depends on are checked; unknown fields pass through
untouched because vLLM accepts many extras (``ignore_eos``, ``cache_salt``, ``top_k`` ...).
Written by hand rather than with a schema library: it runs on every request, a full OpenAI
schema would reject vLLM's extras, and the messages must name the exact JSON path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.refusals import Rejection
from policies.request.field_checks import (
    Invalid,
    content_parts,
    describe,
    int_at_least,
    is_int,
    non_empty_string,
    number_between,
    of_type,
    response_format,
    role_messages,
    string_or_object,
    typed_objects,
    wrong_type,
)
from policies.request.message_fields import COUNT_TOKENS_FIELDS, MESSAGES_FIELDS
from policies.request.response_fields import RESPONSES_FIELDS
from policies.request.types import Endpoint, RequestView

CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

def _not_streamed(param: str, value: Any) -> None:
    """Embeddings come whole: OpenAI's API has no stream of them, and a stream flag let through would
    make the gateway answer with SSE framing around a vector, or wait for events that never come."""
    if type(value) is not bool:
        raise wrong_type(param, "a boolean", value)
    if value:
        raise Invalid(param, f"Embeddings do not stream: '{param}' must be false or left out.")


def _stop(param: str, value: Any) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise wrong_type(param, "a string or an array of strings", value)


def _stream_options(param: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise wrong_type(param, "an object", value)
    include = value.get("include_usage")
    if include is not None and type(include) is not bool:
        raise wrong_type(f"{param}.include_usage", "a boolean", include)


def _tools(param: str, value: Any) -> None:
    for where, tool in typed_objects(param, value):
        function = tool.get("function")
        if function is not None:
            if not isinstance(function, dict):
                raise wrong_type(f"{where}.function", "an object", function)
            if not isinstance(function.get("name"), str):
                raise wrong_type(f"{where}.function.name", "a string", function.get("name"))


def _prompt_like(param: str, value: Any) -> None:
    """str | list[str] | list[int] | list[list[int]], non-empty: what OpenAI accepts for prompt/input."""
    if isinstance(value, str):
        return
    expected = "a string, an array of strings, or an array of token ids"
    if not isinstance(value, list):
        raise wrong_type(param, expected, value)
    if not value:
        raise Invalid(param, f"Invalid '{param}': expected a non-empty array.")
    first = value[0]
    if isinstance(first, str):
        ok = all(isinstance(item, str) for item in value)
    elif is_int(first):
        ok = all(is_int(item) for item in value)
    elif isinstance(first, list):
        ok = all(isinstance(item, list) and all(is_int(t) for t in item) for item in value)
    else:
        ok = False
    if not ok:
        raise wrong_type(param, expected, value)


def _messages(param: str, value: Any) -> None:
    for where, message in role_messages(param, value, CHAT_ROLES):
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            content_parts(f"{where}.content", content)
        name = message.get("name")
        if name is not None and not isinstance(name, str):
            raise wrong_type(f"{where}.name", "a string", name)
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise wrong_type(f"{where}.tool_calls", "an array", tool_calls)


_SAMPLING_FIELDS: dict[str, Callable[[str, Any], None]] = {
    "stream": of_type(bool, "a boolean"),
    "stream_options": _stream_options,
    "n": int_at_least(1),
    "temperature": number_between(0, None),
    "top_p": number_between(0, 1),
    "presence_penalty": number_between(-2, 2),
    "frequency_penalty": number_between(-2, 2),
    "seed": of_type(int, "an integer"),
    "stop": _stop,
    "user": of_type(str, "a string"),
    "logit_bias": of_type(dict, "an object"),
    "cache_salt": non_empty_string,  # vLLM's prefix-cache salt; prefixgate may derive it per tenant
}

_CHAT_FIELDS: dict[str, Callable[[str, Any], None]] = {
    **_SAMPLING_FIELDS,
    "messages": _messages,
    "max_tokens": int_at_least(1),
    "max_completion_tokens": int_at_least(1),
    "logprobs": of_type(bool, "a boolean"),
    "top_logprobs": int_at_least(0),
    "tools": _tools,
    "tool_choice": string_or_object,
    "response_format": response_format,
    "parallel_tool_calls": of_type(bool, "a boolean"),
}

_COMPLETION_FIELDS: dict[str, Callable[[str, Any], None]] = {
    **_SAMPLING_FIELDS,
    "prompt": _prompt_like,
    "max_tokens": int_at_least(0),  # 0 with echo=true is how eval harnesses score prompts
    "logprobs": int_at_least(0),
    "echo": of_type(bool, "a boolean"),
    "best_of": int_at_least(1),
    "suffix": of_type(str, "a string"),
}

_EMBEDDING_FIELDS: dict[str, Callable[[str, Any], None]] = {
    "input": _prompt_like,
    "stream": _not_streamed,
    "encoding_format": of_type(str, "a string"),
    "dimensions": int_at_least(1),
    "user": of_type(str, "a string"),
}

_FIELDS: dict[Endpoint, dict[str, Callable[[str, Any], None]]] = {
    "chat": _CHAT_FIELDS,
    "completions": _COMPLETION_FIELDS,
    "embeddings": _EMBEDDING_FIELDS,
    "responses": RESPONSES_FIELDS,
    "messages": MESSAGES_FIELDS,
    "count_tokens": COUNT_TOKENS_FIELDS,
}

_REQUIRED: dict[Endpoint, tuple[str, ...]] = {
    "chat": ("model", "messages"),
    "completions": ("model", "prompt"),
    "embeddings": ("model", "input"),
    "responses": ("model", "input"),
    "messages": ("model", "messages", "max_tokens"),  # the Messages API requires its output cap
    "count_tokens": ("model", "messages"),
}


def validate_request(endpoint: Endpoint, body: Any) -> RequestView | Rejection:
    """Check a decoded JSON body for ``endpoint``; return what the proxy needs, or why it is refused."""
    if not isinstance(body, dict):
        return Rejection(400, f"Invalid request body: expected a JSON object, but got {describe(body)}.")
    for name in _REQUIRED[endpoint]:
        if body.get(name) is None:
            return Rejection(
                400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
            )
    model = body["model"]
    if not isinstance(model, str) or not model:
        return Rejection(400, wrong_type("model", "a non-empty string", model).message, param="model")
    checks = _FIELDS[endpoint]
    try:
        for name, value in body.items():
            check = checks.get(name)
            if check is not None and value is not None:
                check(name, value)
    except Invalid as invalid:
        return Rejection(400, invalid.message, param=invalid.param)
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    return RequestView(endpoint, model, stream, include_usage, body)
