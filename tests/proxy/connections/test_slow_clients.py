"""Slow and idle clients against a real `prefixgate serve` process: each is closed by its deadline or
by the connection cap while a well-behaved client beside it keeps being served, and long answers and
kept-alive connections outlive the deadlines."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from tests.support.chat_body import chat_body
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.gateways import gateway_processes
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until

HEADER_S, BODY_S = 1.0, 1.5
SLACK_S = 3.0  # how much later than its deadline a close may come on a busy 2-core machine
chat = partial(chat_body, model="fake-model", max_tokens=4)


@contextmanager
def gateway(fake: FakeServer, tmp_path: Path, **server: Any) -> Iterator[str]:
    config = {"pools": [pool("fake", fake.base_url)],
              "server": {"header_timeout_s": HEADER_S, "body_timeout_s": BODY_S, **server}}
    with gateway_processes(config, tmp_path, 1) as origins:
        yield origins[0]


def connect(origin: str) -> socket.socket:
    address = urlsplit(origin)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def trickle_until_closed(sock: socket.socket, pieces: list[bytes], every: float,
                         limit: float = 20) -> tuple[bytes, float]:
    """Send one piece each ``every`` seconds (nothing once they run out) until the gateway closes the
    connection; returns what it sent back and how long the connection lived."""
    started = time.monotonic()
    received = b""
    sock.settimeout(every)
    pending = list(pieces)
    while time.monotonic() - started < limit:
        if pending:
            try:
                sock.sendall(pending.pop(0))
            except OSError:
                pending = []
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not data:
            return received, time.monotonic() - started
        received += data
    return received, time.monotonic() - started


class WellBehaved:
    """A client sending a request every 50 ms on a thread of its own, counting what is not a 200."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.statuses: list[int | str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.origin, timeout=10) as client:
            while not self._stop.is_set():
                try:
                    self.statuses.append(client.post("/v1/chat/completions", json=chat()).status_code)
                except httpx.HTTPError as error:
                    self.statuses.append(type(error).__name__)
                self._stop.wait(0.05)

    def __enter__(self) -> WellBehaved:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def metric(origin: str, name: str, **labels: str) -> float:
    return sample_sum(httpx.get(origin + "/metrics", timeout=10).text, name, **labels)


@pytest.fixture
def proxy(fake: FakeServer, tmp_path: Path) -> Iterator[str]:
    with gateway(fake, tmp_path) as origin:
        yield origin


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
def test_slow_headers_get_a_408_and_are_closed_while_others_are_served(
        fake: FakeServer, tmp_path: Path, http_client: str) -> None:
    headers = [b"POST /v1/chat/completions HTTP/1.1\r\n"] + [b"X-Slow-%d: 1\r\n" % i for i in range(100)]
    with gateway(fake, tmp_path, http_client=http_client) as origin:
        with WellBehaved(origin) as client, connect(origin) as sock:
            received, lived = trickle_until_closed(sock, headers, every=0.3)
        assert received.startswith(b"HTTP/1.1 408 ")
        assert orjson.loads(received.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
        assert HEADER_S - 0.1 < lived < HEADER_S + SLACK_S
        assert client.statuses and set(client.statuses) == {200}
        assert metric(origin, "prefixgate_connections_closed_total", reason="header_timeout") == 1


def test_a_trickled_body_gets_a_408_and_is_closed_while_others_are_served(proxy: str) -> None:
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n")
    with WellBehaved(proxy) as client, connect(proxy) as sock:
        received, lived = trickle_until_closed(sock, [head] + [b"{"] * 100, every=0.3)
    assert received.startswith(b"HTTP/1.1 408 ")
    assert BODY_S - 0.1 < lived < BODY_S + SLACK_S
    assert client.statuses and set(client.statuses) == {200}
    assert metric(proxy, "prefixgate_connections_closed_total", reason="body_timeout") == 1


def test_a_connection_that_never_sends_is_closed_without_a_reply(proxy: str) -> None:
    with connect(proxy) as sock:
        received, lived = trickle_until_closed(sock, [], every=0.2)
    assert received == b""
    assert HEADER_S - 0.1 < lived < HEADER_S + SLACK_S
    assert metric(proxy, "prefixgate_connections_closed_total", reason="idle") == 1


def test_long_streams_slow_but_timely_uploads_and_kept_alive_connections_outlive_the_deadlines(proxy: str) -> None:
    with httpx.Client(base_url=proxy, timeout=30) as client:
        started = time.monotonic()
        with client.stream("POST", "/v1/chat/completions",
                           json=chat(stream=True, max_tokens=30, fake_delay_ms=100)) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert time.monotonic() - started > HEADER_S + BODY_S  # the answer took longer than both deadlines
        assert response.status_code == 200 and lines[-1] == "data: [DONE]" and len(lines) >= 31
        time.sleep(HEADER_S + 0.5)  # idle on the kept-alive connection, within uvicorn's keep-alive timeout
        assert client.post("/v1/chat/completions", json=chat()).status_code == 200

    body = orjson.dumps(chat())
    with connect(proxy) as sock:  # a body in three parts over 0.9 s: slow, within body_timeout_s
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        for part in (body[:5], body[5:10], body[10:]):
            time.sleep(0.3)
            sock.sendall(part)
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    assert metric(proxy, "prefixgate_connections_closed_total") == 0


def test_a_kept_alive_connection_sending_only_line_breaks_is_closed_at_the_keepalive_deadline(
        fake: FakeServer, tmp_path: Path) -> None:
    """Line breaks between requests begin no request, but they reset uvicorn's own keep-alive timer."""
    with gateway(fake, tmp_path, keepalive_timeout_s=1.0) as origin, connect(origin) as sock:
        sock.sendall(_request(chat()))
        received, lived = trickle_until_closed(sock, [b"\r\n"] * 100, every=0.3)
        assert received.startswith(b"HTTP/1.1 200 ") and received.count(b"HTTP/1.1 ") == 1
        assert 1.0 - 0.1 < lived < 1.0 + SLACK_S
        assert metric(origin, "prefixgate_connections_closed_total", reason="idle") == 1


def test_a_request_begun_during_an_answer_gets_a_header_deadline_from_the_answer_end(proxy: str) -> None:
    """Pipelining: the next request's first line arrives with the first request, then a header line every
    0.3 s; the first is answered, the second gets a 408 a header deadline after that answer."""
    with connect(proxy) as sock:
        sock.sendall(_request(chat()) + b"POST /v1/chat/completions HTTP/1.1\r\n")
        received, lived = trickle_until_closed(sock, [b"X-Slow-%d: 1\r\n" % i for i in range(100)], every=0.3)
    answers = received.split(b"HTTP/1.1 ")[1:]
    assert [answer[:3] for answer in answers] == [b"200", b"408"]
    assert lived < HEADER_S + SLACK_S
    assert metric(proxy, "prefixgate_connections_closed_total", reason="header_timeout") == 1


def test_an_upgrade_request_is_answered_and_its_connection_closed(proxy: str) -> None:
    """No WebSocket or h2c here: the parser reads nothing after an upgrade request's headers (its body
    included), so its connection ends with its answer rather than lingering unparsed."""
    with connect(proxy) as sock:
        sock.sendall(_request(chat(), b"Connection: Upgrade\r\nUpgrade: h2c\r\n"))
        received, lived = trickle_until_closed(sock, [], every=0.3)
    assert received.startswith(b"HTTP/1.1 400 ") and b"connection: close" in received.lower()
    assert lived < SLACK_S


def _request(body: dict[str, Any], extra_headers: bytes = b"") -> bytes:
    payload = orjson.dumps(body)
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
            b"Content-Length: %d\r\n\r\n%s" % (extra_headers, len(payload), payload))


def test_at_the_cap_new_connections_close_the_longest_waiting_and_clients_are_served(
        fake: FakeServer, tmp_path: Path) -> None:
    with gateway(fake, tmp_path, max_connections=8, header_timeout_s=60) as origin, ExitStack() as stack:
        flood = [stack.enter_context(connect(origin)) for _ in range(24)]  # nothing sent: idle until evicted
        with WellBehaved(origin) as client:
            wait_until(lambda: len(client.statuses) >= 10, timeout=30, interval=0.05,
                       what="ten answers to the well-behaved client beside the flood", state=lambda: client.statuses)
        for sock in flood:
            sock.settimeout(0.5)
        closed = sum(_closed(sock) for sock in flood)
        assert closed >= 16  # the flood past the cap, and the older ones the client's connections displaced
        assert not _closed(flood[-1])  # the newest waits on: only 60 s would close it
        assert client.statuses and set(client.statuses) == {200}
        assert metric(origin, "prefixgate_connections_closed_total", reason="evicted") >= 16
        assert metric(origin, "prefixgate_connections_open") <= 8 + 1  # the cap, and this scrape's connection


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_over_the_cap_with_every_connection_busy_probes_are_answered_and_the_rest_get_503(
        fake: FakeServer, tmp_path: Path) -> None:
    hanging: list[threading.Thread] = []
    try:
        with gateway(fake, tmp_path, max_connections=2, drain_timeout_s=1) as origin:
            hanging += [threading.Thread(target=_hang, args=(origin,), daemon=True) for _ in range(2)]
            for thread in hanging:
                thread.start()
            wait_until(lambda: fake.app.stats.active >= 2, timeout=10, what="both hanging answers to be under way")
            assert httpx.get(origin + "/health", timeout=5).status_code == 200
            refused = httpx.post(origin + "/v1/chat/completions", json=chat(), timeout=5)
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "too_many_connections"
    finally:
        for thread in hanging:  # their answers end with the gateway
            thread.join(30)


def _hang(origin: str) -> None:
    """An answer that never comes (the fake upstream holds it until the test's gateway stops)."""
    try:
        httpx.post(origin + "/v1/chat/completions", json=chat(model="fake-hang", stream=True), timeout=30)
    except httpx.HTTPError:
        pass


def test_deadlines_hold_with_several_workers(fake: FakeServer, tmp_path: Path) -> None:
    with gateway(fake, tmp_path, workers=2) as origin:
        with WellBehaved(origin) as client:
            results = []
            for _ in range(4):  # several connections, so both workers get some
                with connect(origin) as sock:
                    pieces = [b"GET /health HTTP/1.1\r\n"] + [b"X-A: 1\r\n"] * 20
                    results.append(trickle_until_closed(sock, pieces, every=0.3))
        assert all(received.startswith(b"HTTP/1.1 408 ") for received, _ in results)
        assert all(lived < HEADER_S + SLACK_S for _, lived in results)
        assert client.statuses and set(client.statuses) == {200}
        assert metric(origin, "prefixgate_connections_closed_total", reason="header_timeout") == 4
