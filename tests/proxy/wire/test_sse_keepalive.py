"""Streams that wait long for their first token (queued, or in a long prefill) get SSE comment
keep-alives when the pool sets stream_keepalive, and clients still read a normal answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import orjson
from starlette.testclient import TestClient
from starlette.types import Message

from proxy.wire.sse_keepalive import COMMENT, KeepAlive
from tests.support.clock import CHUNKS, ClockedEngine, FakeClock, meanwhile, settle, settled
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until, wait_until_async


def _stream(model: str = "fake-model", **extra: object) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True, **extra}


def _read_stream(proxy: str, body: dict) -> tuple[int, list[bytes]]:
    """(status, lines) of a streamed request."""
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=30) as response:
        return response.status_code, [line.encode() for line in response.iter_lines() if line]


async def test_keep_alives_go_out_as_the_clock_passes_each_interval() -> None:
    """The status line with the first comment once an interval has passed on the pool's clock, a comment
    each interval after it, none before, and none once stopped."""
    clock = FakeClock()
    sent: list[tuple[float, Message]] = []

    async def send(message: Message) -> None:
        sent.append((clock(), message))

    async def beat(comment: bytes) -> None:
        if not sent:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": comment, "more_body": True})

    keepalive = KeepAlive(beat, 15, clock)
    keepalive.start()
    await settle()  # it waits from now (1000 s)
    clock.advance(14.75)
    await settle()
    assert sent == []
    for step in (0.25, 14.75, 0.25):
        clock.advance(step)
        await settle()
    assert [(at, m["type"], m.get("body")) for at, m in sent] == [
        (1_015.0, "http.response.start", None), (1_015.0, "http.response.body", COMMENT),
        (1_030.0, "http.response.body", COMMENT)]
    await keepalive.stop()
    clock.advance(60)
    await settle()
    assert len(sent) == 3


def test_a_slow_prefill_gets_comments_until_the_first_chunk(tmp_path: Path) -> None:
    """The engine's first chunk comes 40 s after the post on the app's clock, keep-alives every 15 s: the
    client reads two comments, then the answer as the engine sent it."""
    clock = FakeClock()
    engine = ClockedEngine(clock, head_s=40)
    config = {"pools": [pool("p", "http://p:8000/v1", stream_keepalive=15, timeouts={"first_byte": 3600},
                             health={"interval": 0}, engine_metrics={"interval": 0})]}

    def read(client: TestClient) -> tuple[int, list[str]]:
        with client.stream("POST", "/v1/chat/completions", json=_stream()) as response:
            return response.status_code, [line for line in response.iter_lines() if line]

    with in_memory_gateway(config, engine, clock, tmp_path) as client, meanwhile(clock) as background:
        answer = background(read, client)
        wait_until(lambda: engine.posts == 1, timeout=10, what="the stream to reach the engine")
        for _ in range(8):
            clock.advance(5)
            settled(client)
        status, lines = answer.result(timeout=10)
    assert status == 200
    assert lines == [": keep-alive", ": keep-alive", *(chunk.decode().strip() for chunk in CHUNKS)]


def test_a_fast_stream_gets_no_comment(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, stream_keepalive=0.5)]})
    status, lines = _read_stream(proxy, _stream(fake_tokens=5, fake_delay_ms=150))  # 0.75 s, first token at once
    assert status == 200
    assert not [line for line in lines if line.startswith(b":")]


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
