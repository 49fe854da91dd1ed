"""Every kind of refusal, and a bug, raised in every phase of a request reaches the client in OpenAI's
shape: the error JSON with the refusal's status while nothing went out, else (a keep-alive sent the status
line, or chunks were relayed) the stream's last event, ``data: {"error": ...}``. Never uvicorn's plain 500.

The failures come in through the seams: the gateway's transports (a post that raises, or whose stream
breaks off), and one method of a live object where no seam reaches (the pool choice, the replica pick).
"""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import orjson
import pytest
from starlette.testclient import TestClient

from policies.refusals import InternalError, Refusal, Refused
from proxy.http.errors import openai_error
from tests.proxy.http.test_refusals import EXAMPLES
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum

KEEPALIVE_S = 0.01
QUIET = {"health": {"interval": 0}, "engine_metrics": {"interval": 0}}
CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


class Bug(Exception):
    """Stands for any exception the gateway does not expect."""


@dataclass
class Failure:
    """What the next request meets, and where."""

    phase: str = ""
    error: Refusal | None = None  # None: a bug

    def raise_it(self, *args: object, **kwargs: object) -> typing.NoReturn:
        raise Refused(self.error) if self.error is not None else Bug("a bug")


@dataclass
class Reply:
    status: int
    chunks: list[bytes]
    failure: Failure | None = None  # raised once the chunks are out
    content_type: str = "text/event-stream"

    async def read(self) -> bytes:
        return b"".join(self.chunks)

    async def next_chunk(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.failure is not None:
            self.failure.raise_it()
        return b""

    async def close(self, *, abort: bool) -> None:
        pass


@dataclass
class Upstreams:
    """Every replica's transport: answers a stream, unless ``failure`` says its phase is here."""

    failure: Failure
    calls: list[str] = field(default_factory=list)

    def __call__(self, *, connect_timeout: float, headers: Mapping[str, str], max_connections: int,
                 keepalive: float) -> Upstreams:
        return self

    async def post(self, url: str, body: bytes) -> Reply:
        self.calls.append(url)
        phase = self.failure.phase
        if phase == "after keep-alives":
            await asyncio.sleep(KEEPALIVE_S * 10)  # a long prefill: the keep-alives send the status line
        if phase in ("post", "after keep-alives"):
            self.failure.raise_it()
        return Reply(200, [CHUNK], self.failure if phase == "mid-stream" else None)

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        return 404, b""

    async def aclose(self) -> None:
        pass


FAILURE = Failure()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """Pool ``p`` answers model m; ``kept`` (model k) sends SSE keep-alives while a stream waits."""
    config = {"pools": [pool("p", "http://p:8000/v1", models=["m"], **QUIET),
                        pool("kept", "http://k:8000/v1", models=["k"], stream_keepalive=KEEPALIVE_S, **QUIET)]}
    with in_memory_gateway(config, Upstreams(FAILURE), FakeClock(), tmp_path_factory.mktemp("data")) as client:
        yield client


def _one_of_each() -> list[Refusal | None]:
    """An example of every kind of refusal (``typing.get_args(Refusal)``), and None for a bug."""
    kinds: dict[type, Refusal] = {}
    for refusal, _, _ in EXAMPLES:
        kinds.setdefault(type(refusal), refusal)
    assert set(kinds) == set(typing.get_args(Refusal))
    return [*kinds.values(), None]


# (phase, model, stream); where the status line has gone out, the answer is an SSE error event
PHASES = [("preparation", "m", False), ("preparation", "m", True), ("pick", "m", False), ("pick", "m", True),
          ("post", "m", False), ("post", "m", True), ("after keep-alives", "k", True), ("mid-stream", "m", True)]
HEAD_SENT = {"after keep-alives", "mid-stream"}


def _inject(client: TestClient, monkeypatch: pytest.MonkeyPatch, phase: str, error: Refusal | None) -> None:
    FAILURE.phase, FAILURE.error = phase, error
    upstreams = client.app_state["gateway"].upstreams
    if phase == "preparation":  # the step that chooses the pool
        monkeypatch.setattr(upstreams, "pool_for", FAILURE.raise_it)
    elif phase == "pick":  # the call, taking a replica
        monkeypatch.setattr(upstreams.by_name["p"], "pick", FAILURE.raise_it)


@pytest.mark.parametrize("error", _one_of_each(), ids=lambda e: type(e).__name__ if e is not None else "bug")
@pytest.mark.parametrize(("phase", "model", "stream"), PHASES, ids=lambda v: str(v))
def test_a_failure_in_any_phase_reaches_the_client_as_an_openai_error(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, phase: str, model: str, stream: bool,
        error: Refusal | None) -> None:
    _inject(client, monkeypatch, phase, error)
    expected = openai_error(error if error is not None else InternalError())
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as answer:
            text = answer.read()
    finally:
        FAILURE.phase = ""
    if phase in HEAD_SENT:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        assert (b": keep-alive" in text) is (phase == "after keep-alives")
        assert (CHUNK in text) is (phase == "mid-stream")
        assert text.endswith(b"\n\n") and b"[DONE]" not in text
        last = text.rstrip().rsplit(b"\n\n", 1)[-1]
        assert last.startswith(b"data: ")
        sent = orjson.loads(last[6:])["error"]
        assert (sent["message"], sent["type"], sent["code"]) == (expected.message, expected.type, expected.code)
    else:
        assert answer.status_code == expected.status, text
        assert answer.headers["content-type"] == "application/json"
        assert orjson.loads(text) == orjson.loads(expected.body())
        for name, value in expected.headers.items():
            assert answer.headers[name] == value
    assert sample_sum(client.get("/metrics").text, "prefixgate_replica_in_flight") == 0  # every replica given back


def test_a_stream_that_fails_after_keep_alives_is_counted_with_the_errors_status(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client saw 200, but the request failed: it counts as the error it ended with."""
    def failed() -> float:
        return sample_sum(client.get("/metrics").text, "prefixgate_requests_total", pool="kept", status="500")

    before = failed()
    _inject(client, monkeypatch, "after keep-alives", None)
    try:
        answer = client.post("/v1/chat/completions", json={"model": "k", "stream": True,
                                                            "messages": [{"role": "user", "content": "hi"}]})
    finally:
        FAILURE.phase = ""
    assert answer.status_code == 200 and failed() == before + 1
