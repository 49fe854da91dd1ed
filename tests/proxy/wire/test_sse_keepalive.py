"""Streams that wait long for their first token (queued, or in a long prefill) get SSE comment
keep-alives when the pool sets stream_keepalive, and clients still read a normal answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import openai
import orjson

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until_async


def _stream(model: str = "fake-model", **extra: object) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True, **extra}


def _read_stream(proxy: str, body: dict) -> tuple[int, list[tuple[float, bytes]], float]:
    """(status, [(seconds since sent, line)], seconds to the response head) of a streamed request."""
    started = time.perf_counter()
    lines = []
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=30) as response:
        head = time.perf_counter() - started
        for line in response.iter_lines():
            if line:
                lines.append((time.perf_counter() - started, line.encode()))
        return response.status_code, lines, head


def test_a_slow_prefill_gets_comments_until_the_first_chunk(fake: FakeServer,
                                                            start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, stream_keepalive=0.1)]})
    status, lines, head = _read_stream(proxy, _stream("fake-slow-stream", fake_first_ms=550, fake_tokens=3))
    assert status == 200 and head < 0.4  # the head went out with the first keep-alive, not with the first token
    kinds = [line[:1] for _, line in lines]
    data = [line for _, line in lines if line.startswith(b"data: ")]
    assert 3 <= kinds.count(b":") <= 10, lines
    assert kinds[:kinds.count(b":")] == [b":"] * kinds.count(b":"), lines  # only before the first chunk
    assert data[-1] == b"data: [DONE]" and len(data) == 1 + 3 + 1 + 1  # role, tokens, finish, [DONE]


def test_a_fast_stream_gets_no_comment(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, stream_keepalive=0.5)]})
    status, lines, _ = _read_stream(proxy, _stream(fake_tokens=5, fake_delay_ms=150))  # 0.75 s, first token at once
    assert status == 200
    assert not [line for _, line in lines if line.startswith(b":")]


def test_the_openai_sdk_reads_a_stream_with_comments(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, stream_keepalive=0.05)]})
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="unused")
    chunks = list(client.chat.completions.create(
        model="fake-slow-stream", messages=[{"role": "user", "content": "hi"}], stream=True,
        extra_body={"fake_first_ms": 300, "fake_tokens": 4}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == " tok" * 4


def _queued_behind_a_long_answer(proxy: str, fake: FakeServer, second: dict) -> tuple[int, list[bytes]]:
    """A long non-streaming answer holds the pool's one slot while ``second`` streams in the queue."""

    async def scenario() -> tuple[int, list[bytes]]:
        async with httpx.AsyncClient(timeout=30) as client:
            sent = fake.app.stats.requests
            long = asyncio.create_task(client.post(proxy + "/v1/chat/completions", json={
                "model": "fake-model", "messages": [{"role": "user", "content": "x"}],
                "fake_tokens": 5, "fake_delay_ms": 100}))
            await wait_until_async(lambda: fake.app.stats.requests > sent, timeout=10, interval=0.01,
                                   what="the long answer to take the pool's slot (the upstream to have it)")
            async with client.stream("POST", proxy + "/v1/chat/completions", json=second) as response:
                lines = [line.encode() async for line in response.aiter_lines() if line]
            assert (await long).status_code == 200
            return response.status_code, lines

    return asyncio.run(scenario())


def test_a_queued_stream_gets_comments_then_its_answer(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, stream_keepalive=0.1, max_in_flight=1)]})
    status, lines = _queued_behind_a_long_answer(proxy, fake, _stream(fake_tokens=2))
    assert status == 200
    assert lines.count(b": keep-alive") >= 2
    assert lines[-1] == b"data: [DONE]"


def test_an_engine_error_after_comments_is_the_last_event(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    """The 200 is out, so the engine's 400 comes as an SSE event carrying its OpenAI error body."""
    proxy = start_proxy({"pools": [pool("p", fake.base_url, stream_keepalive=0.1, max_in_flight=1)]})
    status, lines = _queued_behind_a_long_answer(proxy, fake, _stream("fake-400"))
    assert status == 200 and lines[0] == b": keep-alive"
    error = orjson.loads(lines[-1].removeprefix(b"data: "))["error"]
    assert error["message"] == "fake bad request"
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_requests_total", route="/chat/completions", status="400",
                      tenant="default", pool="p") == 1


def test_a_queue_timeout_after_comments_is_the_last_event(fake: FakeServer,
                                                          start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, stream_keepalive=0.1, max_in_flight=1,
                                        queue_timeout=0.25)]})
    status, lines = _queued_behind_a_long_answer(proxy, fake, _stream())
    assert status == 200 and lines[0] == b": keep-alive"
    error = orjson.loads(lines[-1].removeprefix(b"data: "))["error"]
    assert error["code"] == "queue_timeout" and error["type"] == "service_unavailable"
    assert b"data: [DONE]" not in lines
