"""Every bad input gets its status and an OpenAI-shaped error body; never a 500 or a traceback.

The gateway runs in memory (``in_memory_gateway``): engines answer through ``MockUpstreams`` and the
first-byte timeout passes on a ``FakeClock``. Only the refused connection keeps a real gateway and a
port nothing listens on: what a refused socket becomes is the HTTP client's to say."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from proxy.transports.base import Reply, Transport, UpstreamUnreachable
from tests.support.chat_body import chat_body
from tests.support.clock import FakeClock, meanwhile, settled
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import Call, MockReply, MockTransport, MockUpstreams
from tests.support.servers import free_port
from tests.support.waiting import wait_until

KEY = "sk-test-tenant-a-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = chat_body(model="fake-model", max_tokens=2)
ENGINE, DOWN = "http://engine:8000/v1", "http://down:8000/v1"
FIRST_BYTE = 0.5
# what an engine answers a request it refuses (a vLLM 400) or fails (a crash), byte for byte
ENGINE_ERRORS = {
    "fake-400": (400, orjson.dumps({"error": {"message": "fake bad request", "type": "BadRequestError", "param": None,
                                              "code": 400}})),
    "fake-500": (500, b'{"error":{"message":"fake crash","type":"InternalServerError","code":500}}'),
}


def engine(url: str, body: bytes) -> MockReply:
    """The engines behind both pools: ``DOWN`` refuses every connection; fake-400 and fake-500 get
    ``ENGINE_ERRORS``; anything else an answer."""
    if url.startswith(DOWN):
        raise UpstreamUnreachable("connection refused")
    model = orjson.loads(body).get("model") if body else None
    if model in ENGINE_ERRORS:
        status, payload = ENGINE_ERRORS[model]
        return MockReply(status, [payload])
    return MockEngine()(url, body)


class HangingTransport(MockTransport):
    """A replica that never answers a request for fake-hang: the post waits until the gateway gives up
    (cancels it)."""

    def __init__(self, upstreams: Engines) -> None:
        super().__init__(upstreams.handler, upstreams.calls)
        self.upstreams = upstreams

    async def post(self, url: str, body: bytes) -> Reply:
        if orjson.loads(body).get("model") != "fake-hang":
            return await super().post(url, body)
        self.calls.append(Call("POST", url, body))
        self.upstreams.hanging += 1
        try:
            await asyncio.get_running_loop().create_future()  # no answer, ever
        finally:
            self.upstreams.hanging -= 1
        raise AssertionError("unreachable: the wait above only ends cancelled")


class Engines(MockUpstreams):
    """``MockUpstreams`` answering with ``engine``, whose replicas hang on fake-hang; ``hanging`` counts the
    requests they hold."""

    def __init__(self) -> None:
        super().__init__(engine)
        self.hanging = 0

    def __call__(self, *, connect_timeout: float, headers: Mapping[str, str], max_connections: int,
                 keepalive: float) -> Transport:
        return HangingTransport(self)


@dataclass
class Gateway:
    client: TestClient
    clock: FakeClock
    upstreams: Engines

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """POST ``path``; a request the engine holds unanswered gets its answer once the clock passes the
        pool's first-byte timeout."""
        with meanwhile(self.clock) as background:
            answer = background(self.client.post, path, **kwargs)
            wait_until(lambda: answer.done() or self.upstreams.hanging, timeout=10, interval=0.002,
                       what="an answer, or the engine to hold the request")
            if not answer.done():
                settled(self.client)
                self.clock.advance(FIRST_BYTE)
            response: httpx.Response = answer.result(timeout=10)
        return response


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    clock, upstreams = FakeClock(), Engines()
    config = {
        "server": {"max_body_bytes": 4096},
        "auth": {"keys": [{"tenant": "a", "key": KEY}]},
        "pools": [
            pool("main", ENGINE, models=["fake-model", "fake-hang", "fake-400", "fake-500"],
                 timeouts={"first_byte": FIRST_BYTE, "total": 2}),
            pool("down", DOWN, models=["down-model"]),
        ],
    }
    with in_memory_gateway(config, upstreams, clock, tmp_path) as client:
        yield Gateway(client, clock, upstreams)


def raw(body: bytes) -> dict[str, Any]:
    return {"content": body, "headers": {**AUTH, "Content-Type": "application/json"}}


def assert_openai_error(response: httpx.Response, status: int, param: str | None, code: str | None) -> None:
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
    ("upstream timeout", "/v1/chat/completions", {"json": {**CHAT, "model": "fake-hang"}, "headers": AUTH},
     504, None, "upstream_timeout"),
    ("unknown route", "/v1/nothing", {"json": CHAT, "headers": AUTH}, 404, None, None),
]


@pytest.mark.parametrize(("name", "path", "kwargs", "status", "param", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_openai_error(
    gateway: Gateway, name: str, path: str, kwargs: dict[str, Any], status: int, param: str | None, code: str | None
) -> None:
    assert_openai_error(gateway.post(path, **kwargs), status, param, code)


@pytest.fixture(scope="module")
def dead_port() -> int:
    return free_port()  # nothing listens here


def test_a_refused_connection_gets_openai_error(start_proxy: Callable[..., str], dead_port: int) -> None:
    """The one case on a real socket: a connection the OS refuses is ``upstream_unreachable``."""
    gateway = start_proxy({"auth": {"keys": [{"tenant": "a", "key": KEY}]},
                           "pools": [pool("down", f"http://127.0.0.1:{dead_port}/v1", models=["down-model"])]})
    response = httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": "down-model"}, headers=AUTH,
                          timeout=10)
    assert_openai_error(response, 502, None, "upstream_unreachable")


def test_wrong_method_is_405_in_openai_shape(gateway: Gateway) -> None:
    response = gateway.client.get("/v1/chat/completions", headers=AUTH)
    assert response.status_code == 405
    assert "error" in response.json()


def test_upstream_4xx_and_5xx_pass_through_unchanged(gateway: Gateway) -> None:
    for model, status in (("fake-400", 400), ("fake-500", 500)):
        sent_status, sent = ENGINE_ERRORS[model]  # what the engine answered
        proxied = gateway.client.post("/v1/chat/completions", json={**CHAT, "model": model}, headers=AUTH)
        assert proxied.status_code == sent_status == status
        assert proxied.content == sent


def test_gateway_keeps_serving_after_upstream_failures(gateway: Gateway) -> None:
    for _ in range(3):
        assert gateway.client.post("/v1/chat/completions", json={**CHAT, "model": "down-model"},
                                   headers=AUTH).status_code == 502
    good = gateway.client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"]


def test_streaming_timeout_before_first_byte_is_504(gateway: Gateway) -> None:
    response = gateway.post("/v1/chat/completions", json={**CHAT, "model": "fake-hang", "stream": True},
                            headers=AUTH)
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout"
