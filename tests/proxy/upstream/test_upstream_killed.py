"""An upstream process killed (SIGKILL) while it streams: each stream it was serving ends with a
terminal SSE error event, every stream on the other replica finishes, and the gateway goes on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx
import orjson
import pytest

from proxy.engine.process import free_port
from tests.support.configs import pool
from tests.support.processes import Spawner
from tests.support.waiting import answers, wait_until, wait_until_async

ROOT = Path(__file__).resolve().parents[3]
STREAMS = 12


@pytest.fixture
def upstreams(spawn: Spawner) -> list[tuple[subprocess.Popen[bytes], str]]:
    """Two fake upstreams, each a process of its own (ended with the test, however it ends)."""
    started = []
    for _ in range(2):
        port = free_port()
        process = spawn([sys.executable, "-m", "tests.support.fake_upstream", "--port", str(port)],
                        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append((process, f"http://127.0.0.1:{port}"))
    for process, origin in started:
        wait_until(partial(answers, origin + "/health", process), timeout=60, interval=0.1,
                   what=f"the fake upstream at {origin} to start")
    return started


def active(origin: str) -> int:
    return httpx.get(origin + "/_stats", timeout=5).json()["active"]


def last_event(body: bytes) -> bytes:
    return [line for line in body.split(b"\n\n") if line.startswith(b"data: ")][-1][len(b"data: "):]


def test_streams_on_a_killed_upstream_end_with_an_error_event_and_the_others_finish(
    upstreams: list[tuple[subprocess.Popen[bytes], str]], start_proxy: Callable[..., str]
) -> None:
    (victim, victim_origin), (_, survivor_origin) = upstreams
    gateway = start_proxy({"pools": [pool("p", victim_origin + "/v1", survivor_origin + "/v1",
                                          models=["fake-model"])]})

    async def run() -> tuple[list[httpx.Response], int]:
        async with httpx.AsyncClient(base_url=gateway, timeout=30) as client:
            calls = [asyncio.create_task(client.post("/v1/chat/completions", json={
                "model": "fake-model", "stream": True, "fake_tokens": 60, "fake_delay_ms": 50,
                "messages": [{"role": "user", "content": f"Conversation {n} about something else entirely."}]}))
                for n in range(STREAMS)]
            await wait_until_async(
                lambda: asyncio.to_thread(lambda: active(victim_origin) + active(survivor_origin) >= STREAMS),
                timeout=10, what="all the streams to start")
            on_victim = await asyncio.to_thread(active, victim_origin)
            os.kill(victim.pid, signal.SIGKILL)
            return await asyncio.gather(*calls), on_victim

    answers, on_victim = asyncio.run(run())
    assert 0 < on_victim < STREAMS, "every stream went to one replica: nothing to compare"
    ends = [last_event(answer.content) for answer in answers]
    broken = [orjson.loads(end)["error"]["code"] for end in ends if end != b"[DONE]"]
    assert all(answer.status_code == 200 for answer in answers)
    assert broken == ["upstream_broken"] * on_victim and ends.count(b"[DONE]") == STREAMS - on_victim
    after = httpx.post(gateway + "/v1/chat/completions", timeout=30,
                       json={"model": "fake-model", "messages": [{"role": "user", "content": "still there?"}]})
    assert after.status_code == 200  # retried on, or sent to, the replica that lives
