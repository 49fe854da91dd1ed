from __future__ import annotations

from typing import Any

import pytest

from policies.refusals import Rejection
from policies.request.types import RequestView
from policies.request.validate import validate_request
from tests.support.chat_body import chat_body as chat

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": MESSAGES}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": 3, "messages": MESSAGES}, "model"),
        ({"model": "", "messages": MESSAGES}, "model"),
        (chat(messages="hello"), "messages"),
        (chat(messages=[]), "messages"),
        (chat(messages=["hello"]), "messages[0]"),
        (chat(messages=[{"content": "x"}]), "messages[0].role"),
        (chat(messages=[{"role": "bot", "content": "x"}]), "messages[0].role"),
        (chat(messages=[MESSAGES[0], {"role": "user", "content": 5}]), "messages[1].content"),
        (chat(messages=[{"role": "user", "content": [{"text": "x"}]}]), "messages[0].content[0].type"),
        (chat(messages=[{"role": "user", "content": "x", "name": 1}]), "messages[0].name"),
        (chat(max_tokens="10"), "max_tokens"),
        (chat(max_tokens=True), "max_tokens"),
        (chat(max_tokens=-1), "max_tokens"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(max_completion_tokens=1.5), "max_completion_tokens"),
        (chat(n=0), "n"),
        (chat(temperature="hot"), "temperature"),
        (chat(temperature=-0.1), "temperature"),
        (chat(top_p=1.5), "top_p"),
        (chat(stream="yes"), "stream"),
        (chat(stream=True, stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
        (chat(stream_options=[]), "stream_options"),
        (chat(stop=[1, 2]), "stop"),
        (chat(tools={"type": "function"}), "tools"),
        (chat(tools=[{"type": "function", "function": {"name": 7}}]), "tools[0].function.name"),
        (chat(response_format={"type": 1}), "response_format.type"),
        (chat(seed=1.5), "seed"),
    ],
)
def test_chat_rejections_name_the_field(body: dict[str, Any], param: str) -> None:
    result = validate_request("chat", body)
    assert isinstance(result, Rejection)
    assert result.status == 400
    assert result.param == param
    assert f"'{param}'" in result.message


@pytest.mark.parametrize("body", [[], "text", 3, None])
def test_body_must_be_an_object(body: Any) -> None:
    result = validate_request("chat", body)
    assert isinstance(result, Rejection) and "JSON object" in result.message


def test_valid_chat_passes_with_extras_untouched() -> None:
    body = chat(
        stream=True, stream_options={"include_usage": True}, max_tokens=5, temperature=0, top_p=1,
        stop=["\n"], ignore_eos=True, cache_salt="abc", tools=[{"type": "function", "function": {"name": "f"}}],
        messages=[
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "x"}]},
            {"role": "assistant", "content": None, "tool_calls": []},
        ],
    )
    view = validate_request("chat", body)
    assert isinstance(view, RequestView)
    assert (view.model, view.stream, view.include_usage) == ("m", True, True)
    assert view.body is body


def test_include_usage_only_counts_for_streams() -> None:
    view = validate_request("chat", chat(stream_options={"include_usage": True}))
    assert isinstance(view, RequestView) and not view.stream and not view.include_usage


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": 5}, "prompt"),
        ({"model": "m", "prompt": []}, "prompt"),
        ({"model": "m", "prompt": ["a", 1]}, "prompt"),
        ({"model": "m", "prompt": "a", "max_tokens": -1}, "max_tokens"),
        ({"model": "m", "prompt": "a", "echo": "no"}, "echo"),
    ],
)
def test_completion_rejections(body: dict[str, Any], param: str) -> None:
    result = validate_request("completions", body)
    assert isinstance(result, Rejection) and result.param == param


@pytest.mark.parametrize("prompt", ["a", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_completion_prompt_forms(prompt: Any) -> None:
    assert isinstance(validate_request("completions", {"model": "m", "prompt": prompt}), RequestView)


def test_completion_allows_zero_max_tokens_for_scoring() -> None:
    body = {"model": "m", "prompt": "a", "max_tokens": 0, "echo": True}
    assert isinstance(validate_request("completions", body), RequestView)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": {"a": 1}}, "input"),
        ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
        ({"model": "m", "input": "x", "stream": True}, "stream"),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
    ],
)
def test_embedding_rejections(body: dict[str, Any], param: str) -> None:
    result = validate_request("embeddings", body)
    assert isinstance(result, Rejection) and result.param == param


def test_an_embeddings_request_that_asks_for_a_stream_is_told_embeddings_do_not_stream() -> None:
    refused = validate_request("embeddings", {"model": "m", "input": "x", "stream": True})
    assert isinstance(refused, Rejection)
    assert (refused.status, refused.type, refused.param) == (400, "invalid_request_error", "stream")
    assert "do not stream" in refused.message
    accepted = validate_request("embeddings", {"model": "m", "input": "x", "stream": False})
    assert isinstance(accepted, RequestView) and not accepted.stream
