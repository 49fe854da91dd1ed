"""A client that stops reading its stream: the gateway holds no more of it than the sockets between
it and the engine do (the engine is made to wait, not the gateway's memory to grow), and nothing is
lost when the client reads again."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import orjson
import pytest

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.waiting import wait_until

CHUNK_BYTES = 4096
CHUNKS = 20_000  # about 83 MB of stream
HELD_AT_MOST = 32 * 1024 * 1024  # socket buffers (Linux autotunes each up to a few MB) and a little more


def request_bytes(origin: str) -> bytes:
    body = orjson.dumps({"model": "fake-model", "stream": True, "fake_tokens": CHUNKS,
                         "fake_chunk_bytes": CHUNK_BYTES, "messages": [{"role": "user", "content": "a lot"}]})
    host = urlsplit(origin).netloc
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def sent_when_stalled(fake: FakeServer) -> int:
    """The upstream's progress once it has stopped moving (for half a second)."""
    last, since = -1, time.monotonic()

    def stalled() -> bool:
        nonlocal last, since
        now = fake.app.stats.chunks_sent
        if now != last:
            last, since = now, time.monotonic()
            return False
        return time.monotonic() - since > 0.5

    wait_until(stalled, timeout=30, what="the upstream to stall (it never did: something buffers the whole stream)",
               state=lambda: f"{fake.app.stats.chunks_sent} chunks sent")
    return last


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
def test_a_client_that_stops_reading_stalls_the_upstream_and_then_gets_every_byte(
    fake: FakeServer, start_proxy: Callable[..., str], http_client: str
) -> None:
    gateway = start_proxy({"server": {"http_client": http_client}, "pools": [pool("p", fake.base_url)]})
    before = fake.app.stats.chunks_sent
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        parts = urlsplit(gateway)
        client.connect((parts.hostname, parts.port))
        client.sendall(request_bytes(gateway))
        held = (sent_when_stalled(fake) - before) * CHUNK_BYTES  # the client has read nothing so far
        assert held < HELD_AT_MOST, f"{held / 2**20:.1f} MB of the stream taken from the upstream unread"
        client.settimeout(30)
        received = bytearray()
        while not received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):  # the chunked body's end
            piece = client.recv(1 << 20)
            assert piece, "the gateway closed the stream early"
            received += piece
    assert fake.app.stats.chunks_sent - before == CHUNKS
    assert received.count(b"x" * CHUNK_BYTES) == CHUNKS  # every chunk arrived, whole
