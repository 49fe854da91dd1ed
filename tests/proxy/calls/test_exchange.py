"""Relay mechanics against the fake upstream, with both HTTP clients; the upstream timeouts on the app's clock."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from policies.prompt.cache_salt import salt_policy
from proxy.config.gateway import OPEN_TENANT
from proxy.transports.base import UpstreamUnreachable
from tests.support.clock import CHUNKS, ClockedEngine, ClockedReply, FakeClock, meanwhile, settled
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.in_memory import in_memory_gateway
from tests.support.waiting import wait_until

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
SALT_SECRET = "relay-salt-secret-0123"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["aiohttp", "httpx"])
def gateway(request: pytest.FixtureRequest, fake: FakeServer, start_proxy: Callable[..., str],
            clock: FakeClock) -> str:
    return start_proxy({
        "server": {"http_client": request.param},
        "pools": [pool("main", fake.base_url, timeouts={"first_byte": 30, "total": 3})],
        "auth": {"cache_salt_secret": SALT_SECRET},
    }, clock=clock)


def events(body: bytes) -> list[bytes]:
    return [line[len(b"data: "):] for line in body.split(b"\n\n") if line.startswith(b"data: ")]


def stats(fake: FakeServer) -> dict[str, Any]:
    return httpx.get(fake.url + "/_stats").json()


def test_stream_is_relayed_byte_for_byte(gateway: str, fake: FakeServer) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    direct = httpx.post(fake.base_url + "/chat/completions", json=body)
    proxied = httpx.post(gateway + "/v1/chat/completions", json=body)
    assert proxied.status_code == 200
    assert proxied.headers["content-type"].startswith("text/event-stream")
    assert proxied.content == direct.content
    parsed = events(proxied.content)
    assert parsed[-1] == b"[DONE]"
    assert orjson.loads(parsed[-2])["usage"]["completion_tokens"] == 5


def test_a_stream_without_include_usage_reaches_the_client_as_the_upstream_would_send_it(
    gateway: str, fake: FakeServer
) -> None:
    """The gateway asks the engine for the usage event (to charge the tokens it reports, not a count
    of events) and takes it out again: the client gets what it would have got directly."""
    body = {**CHAT, "stream": True}
    direct = httpx.post(fake.base_url + "/chat/completions", json=body)
    proxied = httpx.post(gateway + "/v1/chat/completions", json=body)
    assert proxied.status_code == 200 and proxied.content == direct.content
    assert b'"usage"' not in proxied.content
    assert httpx.get(fake.url + "/_stats").json()["last_body"]["stream_options"] == {"include_usage": True}


def test_request_body_reaches_upstream_unchanged(gateway: str, fake: FakeServer) -> None:
    body = {**CHAT, "ignore_eos": True, "cache_salt": "s1", "vendor_extra": {"a": [1, 2]}}
    assert httpx.post(gateway + "/v1/chat/completions", json=body).status_code == 200
    # All but the salt, which the default "isolate" mode mixes with the tenant's own (test_cache_salt.py).
    salt = salt_policy("isolate", SALT_SECRET.encode(), OPEN_TENANT).upstream_salt("s1")
    assert httpx.get(fake.url + "/_stats").json()["last_body"] == {**body, "cache_salt": salt}


def test_non_streaming_answer_is_relayed_unchanged(gateway: str, fake: FakeServer) -> None:
    direct = httpx.post(fake.base_url + "/chat/completions", json=CHAT)
    proxied = httpx.post(gateway + "/v1/chat/completions", json=CHAT)
    assert proxied.status_code == 200 and proxied.content == direct.content


@pytest.mark.parametrize("model", ["fake-die", "fake-nodone"])
def test_broken_stream_ends_with_error_event(gateway: str, model: str) -> None:
    response = httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": model, "stream": True})
    assert response.status_code == 200
    last = orjson.loads(events(response.content)[-1])
    assert last["error"]["type"] == "upstream_error" and last["error"]["code"] == "upstream_broken"


def test_total_timeout_mid_stream_ends_with_error_event(gateway: str, clock: FakeClock) -> None:
    """The engine would stream for 5 s; the pool's total timeout (3 s) passes on the app's clock once the
    first event is out, and the stream ends at once with an error event, the engine's connection dropped."""
    body = {**CHAT, "stream": True, "max_tokens": 100, "fake_delay_ms": 50}
    received = []
    with httpx.stream("POST", gateway + "/v1/chat/completions", json=body, timeout=10) as response:
        for line in response.iter_lines():
            if line:
                received.append(line)
            if len(received) == 1:
                clock.advance(3)
    assert len(received) < 20, received  # cut off long before the engine's 100 events
    assert orjson.loads(received[-1].removeprefix("data: "))["error"]["code"] == "upstream_timeout"


def _timed(clock: FakeClock, engine: ClockedEngine, tmp_path: Path) -> AbstractContextManager[TestClient]:
    config = {"pools": [pool("p", "http://p:8000/v1", timeouts={"first_byte": 20, "total": 40},
                             health={"interval": 0}, engine_metrics={"interval": 0})]}
    return in_memory_gateway(config, engine, clock, tmp_path)


def test_an_upstream_that_sends_no_first_byte_is_given_up_on_as_the_clock_passes_first_byte(tmp_path: Path) -> None:
    """The engine never answers: the client gets 504 upstream_timeout when the app's clock passes the pool's
    first-byte timeout (20 s), not before, and no test sleeps through it."""
    clock = FakeClock()
    engine = ClockedEngine(clock, head_s=None)
    with _timed(clock, engine, tmp_path) as client, meanwhile(clock) as background:
        answer = background(client.post, "/v1/chat/completions", json=CHAT)
        wait_until(lambda: engine.posts == 1, timeout=10, what="the request to reach the engine")
        clock.advance(19.75)
        settled(client)
        assert engine.given_up == [] and not answer.done()
        clock.advance(0.25)
        response = answer.result(timeout=10)
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout"
    assert engine.given_up == [1_020.0]


def test_a_stream_past_the_total_timeout_ends_with_an_error_event_as_the_clock_passes_it(tmp_path: Path) -> None:
    """The first event comes at once, then nothing: the first-byte timeout no longer counts, and the stream
    ends with an upstream_timeout event when the app's clock passes the total timeout (40 s)."""
    clock = FakeClock()
    engine = ClockedEngine(clock, head_s=0, chunk_s=None)

    def stream(client: TestClient) -> bytes:
        with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
            assert response.status_code == 200
            return response.read()

    with _timed(clock, engine, tmp_path) as client, meanwhile(clock) as background:
        answer = background(stream, client)
        wait_until(lambda: engine.posts == 1, timeout=10, what="the request to reach the engine")
        clock.advance(39.75)
        settled(client)
        assert engine.given_up == [] and not answer.done()
        clock.advance(0.25)
        text = answer.result(timeout=10)
    assert text.startswith(CHUNKS[0]) and b"[DONE]" not in text
    assert orjson.loads(events(text)[-1])["error"]["code"] == "upstream_timeout"
    assert engine.given_up == [1_040.0]


async def test_one_broken_stream_leaves_concurrent_streams_intact(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=10) as client:
        good = {**CHAT, "stream": True, "max_tokens": 20, "fake_delay_ms": 5}
        bad = {**CHAT, "model": "fake-die", "stream": True, "fake_delay_ms": 5}
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=good) for _ in range(8)),
            client.post("/v1/chat/completions", json=bad),
        )
    for answer in answers[:8]:
        assert events(answer.content)[-1] == b"[DONE]"
    assert b"upstream_broken" in answers[8].content


def _open_stream(gateway: str, body: dict[str, Any]) -> socket.socket:
    host, port = gateway.removeprefix("http://").split(":")
    payload = orjson.dumps(body)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload
    )
    return sock


def test_client_leaving_mid_stream_closes_upstream(gateway: str, fake: FakeServer) -> None:
    before = stats(fake)["disconnects"]
    sock = _open_stream(gateway, {**CHAT, "stream": True, "max_tokens": 400, "fake_delay_ms": 20})
    assert b"200 OK" in sock.recv(4096)
    sock.close()
    wait_until(lambda: stats(fake)["disconnects"] > before, timeout=1.0, interval=0.02,
               what="the upstream to see its request dropped", state=lambda: stats(fake))
    assert stats(fake)["active"] == 0


def test_client_leaving_before_first_byte_closes_upstream(gateway: str, fake: FakeServer) -> None:
    """While the engine is still in prefill nothing is written, so only a receive-side watch notices."""
    before = stats(fake)["disconnects"]
    sock = _open_stream(gateway, {**CHAT, "model": "fake-hang", "stream": True})
    wait_until(lambda: stats(fake)["active"] > 0, timeout=2.0, interval=0.02, what="the request to reach the upstream")
    sock.close()
    wait_until(lambda: stats(fake)["disconnects"] > before, timeout=1.0, interval=0.02,
               what="the upstream to see its request dropped", state=lambda: stats(fake))


class _ResetEngine(ClockedEngine):
    """Its connection resets ``head_s`` seconds after the post, before any answer."""

    async def post(self, url: str, body: bytes) -> ClockedReply:
        self.posts += 1
        await self.wait(self.head_s)
        raise UpstreamUnreachable("connection reset before an answer")


def test_an_unreachable_engine_has_one_code_whether_or_not_keep_alives_went_out(tmp_path: Path) -> None:
    """The engine's connection resets 20 s after the post. A JSON request gets the 502 upstream_unreachable; a
    stream whose status line a keep-alive sent (at 15 s) ends with an event of the same code and type."""
    clock = FakeClock()
    engine = _ResetEngine(clock, head_s=20)
    config = {"pools": [pool("p", "http://p:8000/v1", stream_keepalive=15, timeouts={"first_byte": 3600},
                             health={"interval": 0}, engine_metrics={"interval": 0})]}

    def stream(client: TestClient) -> bytes:
        with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
            assert response.status_code == 200
            return response.read()

    with in_memory_gateway(config, engine, clock, tmp_path) as client, meanwhile(clock) as background:
        whole = background(client.post, "/v1/chat/completions", json=CHAT)
        streamed = background(stream, client)
        wait_until(lambda: engine.posts == 2, timeout=10, what="both requests to reach the engine")
        for _ in range(5):
            clock.advance(5)
            settled(client)
        answer, text = whole.result(timeout=10), streamed.result(timeout=10)
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert text.startswith(b": keep-alive\n\n") and b"[DONE]" not in text
    event = orjson.loads(events(text)[-1])["error"]
    assert (event["code"], event["type"]) == (error["code"], error["type"])
