"""Every bad input gets its status and an OpenAI-shaped error body; never a 500 or a traceback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.servers import free_port

KEY = "sk-test-tenant-a-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def dead_port() -> int:
    return free_port()  # nothing listens here


@pytest.fixture
def gateway(fake: FakeServer, start_proxy: Callable[..., str], dead_port: int) -> str:
    return start_proxy({
        "server": {"max_body_bytes": 4096},
        "auth": {"keys": [{"tenant": "a", "key": KEY}]},
        "pools": [
            pool("main", fake.base_url, models=["fake-model", "fake-hang", "fake-400", "fake-500"],
                 timeouts={"first_byte": 0.5, "total": 2}),
            pool("down", f"http://127.0.0.1:{dead_port}/v1", models=["down-model"]),
        ],
    })


def raw(body: bytes) -> dict[str, Any]:
    return {"content": body, "headers": {**AUTH, "Content-Type": "application/json"}}


CASES: list[tuple[str, str, dict[str, Any], int, str | None, str | None]] = [
    # (name, path, request kwargs, status, param, code)
    ("malformed json", "/v1/chat/completions", raw(b'{"model": "fake-model", '), 400, None, "invalid_json"),
    ("empty body", "/v1/chat/completions", raw(b""), 400, None, "invalid_json"),
    ("invalid utf-8", "/v1/chat/completions", raw(b'{"model": "\xff\xfe"}'), 400, None, "invalid_json"),
    ("json array", "/v1/chat/completions", raw(b"[1, 2]"), 400, None, None),
    ("missing model", "/v1/chat/completions", {"json": {"messages": CHAT["messages"]}, "headers": AUTH},
     400, "model", "missing_required_parameter"),
    ("messages wrong type", "/v1/chat/completions", {"json": {**CHAT, "messages": "hi"}, "headers": AUTH},
     400, "messages", None),
    ("max_tokens string", "/v1/chat/completions", {"json": {**CHAT, "max_tokens": "9"}, "headers": AUTH},
     400, "max_tokens", None),
    ("negative max_tokens", "/v1/chat/completions", {"json": {**CHAT, "max_tokens": -3}, "headers": AUTH},
     400, "max_tokens", None),
    ("unknown role", "/v1/chat/completions",
     {"json": {**CHAT, "messages": [{"role": "wizard", "content": "x"}]}, "headers": AUTH},
     400, "messages[0].role", None),
    ("completions prompt type", "/v1/completions",
     {"json": {"model": "fake-model", "prompt": {"x": 1}}, "headers": AUTH}, 400, "prompt", None),
    ("streamed embeddings", "/v1/embeddings",
     {"json": {"model": "fake-model", "input": "hi", "stream": True}, "headers": AUTH}, 400, "stream", None),
    ("unknown model", "/v1/chat/completions", {"json": {**CHAT, "model": "gpt-9"}, "headers": AUTH},
     404, "model", "model_not_found"),
    ("body too large", "/v1/chat/completions",
     {"json": {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}, "headers": AUTH},
     413, None, "request_too_large"),
    ("no api key", "/v1/chat/completions", {"json": CHAT}, 401, None, "missing_api_key"),
    ("wrong api key", "/v1/chat/completions", {"json": CHAT, "headers": {"Authorization": "Bearer sk-wrong-0000"}},
     401, None, "invalid_api_key"),
    ("not bearer", "/v1/chat/completions", {"json": CHAT, "headers": {"Authorization": KEY}},
     401, None, "invalid_api_key"),
    ("upstream unreachable", "/v1/chat/completions", {"json": {**CHAT, "model": "down-model"}, "headers": AUTH},
     502, None, "upstream_unreachable"),
    ("upstream timeout", "/v1/chat/completions", {"json": {**CHAT, "model": "fake-hang"}, "headers": AUTH},
     504, None, "upstream_timeout"),
    ("unknown route", "/v1/nothing", {"json": CHAT, "headers": AUTH}, 404, None, None),
]


@pytest.mark.parametrize(("name", "path", "kwargs", "status", "param", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_openai_error(
    gateway: str, name: str, path: str, kwargs: dict[str, Any], status: int, param: str | None, code: str | None
) -> None:
    response = httpx.post(gateway + path, timeout=10, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and isinstance(error["type"], str)
    assert "Traceback" not in response.text
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert KEY not in response.text  # keys never echo back


def test_wrong_method_is_405_in_openai_shape(gateway: str) -> None:
    response = httpx.get(gateway + "/v1/chat/completions", headers=AUTH)
    assert response.status_code == 405
    assert "error" in response.json()


def test_upstream_4xx_and_5xx_pass_through_unchanged(gateway: str, fake: FakeServer) -> None:
    for model, status in (("fake-400", 400), ("fake-500", 500)):
        direct = httpx.post(fake.base_url + "/chat/completions", json={**CHAT, "model": model})
        proxied = httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": model}, headers=AUTH)
        assert proxied.status_code == direct.status_code == status
        assert proxied.content == direct.content


def test_gateway_keeps_serving_after_upstream_failures(gateway: str) -> None:
    for _ in range(3):
        assert httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": "down-model"},
                          headers=AUTH).status_code == 502
    good = httpx.post(gateway + "/v1/chat/completions", json=CHAT, headers=AUTH)
    assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"]


def test_streaming_timeout_before_first_byte_is_504(gateway: str) -> None:
    response = httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": "fake-hang", "stream": True},
                          headers=AUTH, timeout=10)
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout"
