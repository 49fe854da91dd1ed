"""SIGTERM to `prefixgate serve`: it stops taking new connections, lets the answers in flight finish
up to server.drain_timeout_s, tells those still running past it that it is shutting down, and exits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import httpx
import orjson
import yaml

from proxy.engine.process import free_port
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.waiting import answers, wait_until


@contextmanager
def serving(fake: FakeServer, tmp_path: Path, **server: object) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"server": {"port": port, **server}, "pools": [pool("p", fake.base_url)],
                                      "data_dir": str(tmp_path)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    process = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(config)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(partial(answers, f"http://127.0.0.1:{port}/health", process), timeout=60, interval=0.2,
                   what="prefixgate to start")
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)



@contextmanager
def in_a_thread(call: Callable[[], None]) -> Iterator[threading.Thread]:
    """``call`` on a thread of its own for the block, joined when the block ends, however it ends (an
    ``httpx.HTTPError`` it raises, a gateway killed under it, ends it quietly)."""

    def run() -> None:
        try:
            call()
        except httpx.HTTPError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(60)


@contextmanager
def stream_under_way(port: int, tokens: int, delay_ms: int) -> Iterator[tuple[threading.Thread, list[bytes]]]:
    """A stream of ``tokens`` chunks ``delay_ms`` apart, read in a thread; yields once its first bytes came.
    The reader is joined when the block ends."""
    received: list[bytes] = []
    body = {"model": "fake-model", "stream": True, "fake_tokens": tokens, "fake_delay_ms": delay_ms,
            "messages": [{"role": "user", "content": "a long answer, please"}]}

    def stream() -> None:
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60) as answer:
            for chunk in answer.iter_bytes():
                received.append(chunk)

    with in_a_thread(stream) as reader:

        def begun() -> bool:
            assert received or reader.is_alive(), "the stream ended before its first bytes"
            return bool(received)

        wait_until(begun, timeout=30, interval=0.02, what="the stream's first bytes")
        yield reader, received


def connection_refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def test_sigterm_lets_streams_in_flight_finish_and_refuses_new_connections(fake: FakeServer, tmp_path: Path) -> None:
    with serving(fake, tmp_path) as (process, port):
        with stream_under_way(port, tokens=20, delay_ms=100) as (reader, received):
            process.send_signal(signal.SIGTERM)
            # uvicorn closes its listening socket as soon as it handles the signal
            wait_until(lambda: connection_refused(port), timeout=5,
                       what="new connections to be refused after SIGTERM (one was still accepted)")
            reader.join(30)
        assert process.wait(30) == 0
    text = b"".join(received).decode()
    assert text.count('"chat.completion.chunk"') >= 20 and text.rstrip().endswith("data: [DONE]"), text[-300:]


def test_a_stream_still_running_at_the_drain_deadline_ends_with_a_shutting_down_event(
    fake: FakeServer, tmp_path: Path
) -> None:
    """A 6 s stream, a 1 s deadline: the client learns why its stream stopped (and may retry), the
    engine's request is aborted, and the process exits without waiting for the stream."""
    disconnects = fake.app.stats.disconnects
    with serving(fake, tmp_path, drain_timeout_s=1) as (process, port):
        with stream_under_way(port, tokens=60, delay_ms=100) as (reader, received):
            process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            assert process.wait(20) == 0
            exited = time.monotonic() - signalled
            reader.join(10)
    events = [line[len(b"data: "):] for line in b"".join(received).split(b"\n\n") if line.startswith(b"data: ")]
    assert 1 <= exited < 4, exited
    assert events[-1] != b"[DONE]" and orjson.loads(events[-1])["error"]["code"] == "shutting_down"
    assert 5 <= len(events) - 1 < 60  # it was cut short, after the chunks it got in the second allowed
    wait_until(lambda: fake.app.stats.disconnects != disconnects, timeout=5,
               what="the upstream to see a request dropped")
    assert fake.app.stats.disconnects == disconnects + 1  # the upstream saw its request dropped


def test_an_answer_not_begun_at_the_drain_deadline_gets_a_503_to_retry(fake: FakeServer, tmp_path: Path) -> None:
    answers: list[httpx.Response] = []
    body = {"model": "fake-model", "fake_tokens": 80, "fake_delay_ms": 100,  # a JSON answer after 8 s
            "messages": [{"role": "user", "content": "slow to start"}]}
    with serving(fake, tmp_path, drain_timeout_s=1) as (process, port):
        active = fake.app.stats.active
        ask = lambda: answers.append(  # noqa: E731
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30))
        with in_a_thread(ask) as asking:
            wait_until(lambda: fake.app.stats.active != active, timeout=10, interval=0.02,
                       what="the request to reach the upstream")
            process.send_signal(signal.SIGTERM)
            assert process.wait(20) == 0
            asking.join(10)
    assert answers, "the request got no answer"
    assert answers[0].status_code == 503 and answers[0].headers["retry-after"] == "1"
    assert answers[0].json()["error"]["code"] == "shutting_down"
