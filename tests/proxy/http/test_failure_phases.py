"""Every kind of refusal, and a bug, raised in every phase of a request reaches the client in OpenAI's
shape: the error JSON with the refusal's status while nothing went out, else (a keep-alive sent the status
line, or chunks were relayed) the stream's last event, ``data: {"error": ...}``. Never uvicorn's plain 500.
And whatever failed, the request keeps nothing: its replica, its pool's slot and its place in the pool's
queue are given back, and admission's hold on the tenant's tokens is settled exactly once.

The phases are those of docs/architecture.md's "Errors": the preparation (the pool choice), the slot (taken
at once, or waited for in the pool's queue), the replica pick, the exchange (the post, a stream after
keep-alives or midway), the litellm relay. The failures come in through the seams: the gateway's transports
(a post that raises, or whose stream breaks off), litellm as the relay loads it, and one method or part of a
live object where no seam reaches (the pool choice, the slot, the queue, the replica pick).
"""

from __future__ import annotations

import asyncio
import typing
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field

import orjson
import pytest
from starlette.testclient import TestClient

from policies.admission.fair_queue import FairQueue
from policies.admission.limits import RateLimits, Verdict
from policies.refusals import InternalError, ProviderFailed, Refusal, Refused
from proxy.admission.pool_gate import PoolGate
from proxy.admission.rate_limiter import Ticket
from proxy.upstream import litellm_pool
from proxy.upstream.pool import Relayed, RelayedStream
from proxy.wire.errors import OpenAIError, openai_error, refusal_event
from tests.proxy.http.test_refusals import EXAMPLES
from tests.support.clock import FakeClock, settle
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum

KEEPALIVE_S = 0.01
QUIET = {"health": {"interval": 0}, "engine_metrics": {"interval": 0}}
CHUNK_EVENT = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
CHUNK = b"data: " + orjson.dumps(CHUNK_EVENT) + b"\n\n"


class Bug(Exception):
    """Stands for any exception the gateway does not expect."""


@dataclass
class Failure:
    """What the next request meets, and where."""

    phase: str = ""
    error: Refusal | None = None  # None: a bug

    def exception(self) -> Exception:
        return Refused(self.error) if self.error is not None else Bug("a bug")

    def raise_it(self, *args: object, **kwargs: object) -> typing.NoReturn:
        raise self.exception()


FAILURE = Failure()


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
    clock: FakeClock
    calls: list[str] = field(default_factory=list)

    def __call__(self, *, connect_timeout: float, headers: Mapping[str, str], max_connections: int,
                 keepalive: float) -> Upstreams:
        return self

    async def post(self, url: str, body: bytes) -> Reply:
        self.calls.append(url)
        phase = self.failure.phase
        if phase == "after keep-alives":  # a long prefill on the app's clock: the keep-alives send the status line
            for _ in range(3):
                self.clock.advance(KEEPALIVE_S)
                await settle()
        if phase in ("post", "after keep-alives"):
            self.failure.raise_it()
        return Reply(200, [CHUNK], self.failure if phase == "mid-stream" else None)

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        return 404, b""

    async def aclose(self) -> None:
        pass


class FailsItsWaiters(FairQueue[asyncio.Future[None]]):
    """A pool's queue whose waiters' wait fails as soon as they are in it, with ``FAILURE``'s error: the way
    the gate itself ends a wait it refuses (it sets the refusal on the waiter it displaces)."""

    __slots__ = ()

    def push(self, tenant: str, item: asyncio.Future[None]) -> None:
        super().push(tenant, item)
        asyncio.get_running_loop().call_soon(item.set_exception, FAILURE.exception())


class ProviderChunk:
    """One chunk of a litellm stream, as the relay reads it."""

    usage = None

    def model_dump(self, *, exclude_none: bool) -> dict[str, object]:
        return CHUNK_EVENT


class BrokenProvider:
    """Stands for litellm: the provider's stream breaks off after its first chunk, with ``FAILURE``'s error."""

    async def acompletion(self, **arguments: object) -> AsyncIterator[ProviderChunk]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[ProviderChunk]:
        yield ProviderChunk()
        FAILURE.raise_it()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """Each pool answers the model of its name. ``kept`` sends SSE keep-alives while a stream waits; ``gated``
    has one slot and a queue of one (a slot or a place a request keeps fails that request's test, ``gate``);
    their waits run on the app's FakeClock, which only the keep-alive phase's upstream moves; ``hosted`` is of
    kind litellm (its provider is never reached: the relay's litellm is replaced). The open tenant has a token
    budget, so each request that reaches the call holds part of it."""
    hosted = {"name": "hosted", "kind": "litellm", "models": ["hosted"], "litellm_model": "openai/model",
              "api_base": "http://hosted.invalid/v1", "api_key": "sk-provider"}
    config = {"pools": [pool("p", "http://p:8000/v1", models=["p"], **QUIET),
                        pool("kept", "http://k:8000/v1", models=["kept"], stream_keepalive=KEEPALIVE_S, **QUIET),
                        pool("gated", "http://g:8000/v1", models=["gated"], max_in_flight=1, queue_size=1, **QUIET),
                        hosted],
              "limits": {"tokens_per_minute": 1_000_000_000}}
    clock = FakeClock()
    with in_memory_gateway(config, Upstreams(FAILURE, clock), clock, tmp_path_factory.mktemp("data")) as client:
        yield client


@dataclass
class Ledger:
    """The tickets admission's limiter handed out during one request, and the settlements it was told of."""

    tickets: list[Ticket] = field(default_factory=list)
    settled: list[tuple[Ticket, int]] = field(default_factory=list)


@pytest.fixture
def ledger(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """Every hold is a limiter ticket, settled with the tokens used (0: given back whole)."""
    limiter = client.app_state["gateway"].admission.limiter
    admit, settle, ledger = limiter.admit, limiter.settle, Ledger()

    async def admitting(tenant: str, limits: RateLimits, tokens: int) -> tuple[Verdict, Ticket | None]:
        verdict, ticket = await admit(tenant, limits, tokens)
        if ticket is not None:
            ledger.tickets.append(ticket)
        return verdict, ticket

    async def settling(ticket: Ticket, tokens: int) -> None:
        ledger.settled.append((ticket, tokens))
        await settle(ticket, tokens)

    monkeypatch.setattr(limiter, "admit", admitting)
    monkeypatch.setattr(limiter, "settle", settling)
    return ledger


@pytest.fixture
def gate(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> PoolGate:
    """The gated pool's gate; its count is put back as it was after each test, so a slot that one test
    leaks fails that test, not every test after it."""
    gate = client.app_state["gateway"].upstreams.by_name["gated"].gate
    assert gate is not None
    monkeypatch.setattr(gate, "in_flight", gate.in_flight)
    return gate


def _one_of_each() -> list[Refusal | None]:
    """An example of every kind of refusal (``typing.get_args(Refusal)``), and None for a bug."""
    kinds: dict[type, Refusal] = {}
    for refusal, _, _ in EXAMPLES:
        kinds.setdefault(type(refusal), refusal)
    assert set(kinds) == set(typing.get_args(Refusal))
    return [*kinds.values(), None]


# (phase, pool, stream); the request asks for the model of the pool's name
PHASES = [("preparation", "p", False), ("preparation", "p", True), ("pick", "p", False), ("pick", "p", True),
          ("post", "p", False), ("post", "p", True), ("after keep-alives", "kept", True), ("mid-stream", "p", True),
          ("slot", "gated", False), ("queued", "gated", True), ("pick", "gated", False), ("post", "gated", True),
          ("mid-stream", "gated", True),
          ("relay", "hosted", False), ("relay", "hosted", True), ("relay mid-stream", "hosted", True)]
HEAD_SENT = {"after keep-alives", "mid-stream", "relay mid-stream"}  # answered with an SSE error event
GIVEN_BACK = {"slot", "queued", "pick"}  # no engine worked on the request: its tokens go back whole


def _inject(client: TestClient, monkeypatch: pytest.MonkeyPatch, phase: str, pool_name: str,
            error: Refusal | None) -> None:
    """Arm ``FAILURE`` for the next request, to ``pool_name``; the transports read it themselves, the other
    seams are patched here."""
    FAILURE.phase, FAILURE.error = phase, error
    upstreams = client.app_state["gateway"].upstreams
    gate = upstreams.by_name[pool_name].gate
    if phase == "preparation":  # the step that chooses the pool
        monkeypatch.setattr(upstreams, "pool_for", FAILURE.raise_it)
    elif phase == "slot":  # taking a free slot of the pool
        monkeypatch.setattr(PoolGate, "acquire", FAILURE.raise_it)
    elif phase == "queued":  # another request holds the only slot: the request waits in the queue, and fails there
        assert gate is not None
        monkeypatch.setattr(gate, "queue", FailsItsWaiters(gate.queue.bound))
        monkeypatch.setattr(gate, "in_flight", gate.capacity)
    elif phase == "pick":  # the call, taking a replica (after its slot, in a gated pool)
        monkeypatch.setattr(upstreams.by_name[pool_name], "pick", FAILURE.raise_it)
    elif phase == "relay":  # the litellm relay, before it sent anything
        monkeypatch.setattr(litellm_pool, "load_litellm", FAILURE.raise_it)
    elif phase == "relay mid-stream":  # the provider's stream, after its first chunk
        monkeypatch.setattr(litellm_pool, "load_litellm", BrokenProvider)


def _expected(phase: str, error: Refusal | None) -> OpenAIError:
    if phase == "relay mid-stream":  # whatever breaks a provider's stream, the relay answers: the provider failed
        return openai_error(ProviderFailed("hosted", 502, str(FAILURE.exception())))
    return openai_error(error if error is not None else InternalError())


def _assert_answered(status: int, headers: Mapping[str, str], text: bytes, phase: str,
                     expected: OpenAIError) -> None:
    """OpenAI's error JSON while nothing went out, else the stream's last event."""
    if phase in HEAD_SENT:
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        assert (b": keep-alive" in text) is (phase == "after keep-alives")
        assert (CHUNK in text) is (phase != "after keep-alives")
        assert text.endswith(b"\n\n") and b"[DONE]" not in text
        last = text.rstrip().rsplit(b"\n\n", 1)[-1]
        assert last.startswith(b"data: ")
        sent = orjson.loads(last[6:])["error"]
        assert (sent["message"], sent["type"], sent["code"]) == (expected.message, expected.type, expected.code)
    else:
        assert status == expected.status, text
        assert headers["content-type"] == "application/json"
        assert orjson.loads(text) == orjson.loads(expected.body())
        for name, value in expected.headers.items():
            assert headers[name] == value


def _assert_nothing_kept(client: TestClient, gate: PoolGate, ledger: Ledger, phase: str) -> None:
    """The replica, the gated pool's slot and its place in the queue are given back; admission's hold (a
    ticket, taken once the pool is chosen) is settled exactly once: with 0 tokens, given back whole, where no
    engine worked on the request, else with the tokens counted as used."""
    assert sample_sum(client.get("/metrics").text, "prefixgate_replica_in_flight") == 0
    held = gate.capacity if phase == "queued" else 0  # the other request's, which the queued one waited for
    assert (gate.in_flight, gate.queue.size) == (held, 0)
    assert len(ledger.tickets) == (0 if phase == "preparation" else 1)
    assert [ticket for ticket, _ in ledger.settled] == ledger.tickets
    assert [tokens == 0 for _, tokens in ledger.settled] == [phase in GIVEN_BACK] * len(ledger.tickets)


@pytest.mark.parametrize("error", _one_of_each(), ids=lambda e: type(e).__name__ if e is not None else "bug")
@pytest.mark.parametrize(("phase", "pool_name", "stream"), PHASES, ids=lambda v: str(v))
def test_a_failure_in_any_phase_reaches_the_client_as_an_openai_error_and_keeps_nothing(
        client: TestClient, gate: PoolGate, ledger: Ledger, monkeypatch: pytest.MonkeyPatch, phase: str,
        pool_name: str, stream: bool, error: Refusal | None) -> None:
    """One request per phase and kind of failure, on one gateway: each test checks what its own request left."""
    _inject(client, monkeypatch, phase, pool_name, error)
    expected = _expected(phase, error)
    body = {"model": pool_name, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as answer:
            text = answer.read()
    finally:
        FAILURE.phase = ""
    _assert_answered(answer.status_code, answer.headers, text, phase, expected)
    _assert_nothing_kept(client, gate, ledger, phase)


def test_a_stream_that_fails_after_keep_alives_is_counted_with_the_errors_status(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client saw 200, but the request failed: it counts as the error it ended with."""
    def failed() -> float:
        return sample_sum(client.get("/metrics").text, "prefixgate_requests_total", pool="kept", status="500")

    before = failed()
    _inject(client, monkeypatch, "after keep-alives", "kept", None)
    try:
        answer = client.post("/v1/chat/completions", json={"model": "kept", "stream": True,
                                                            "messages": [{"role": "user", "content": "hi"}]})
    finally:
        FAILURE.phase = ""
    assert answer.status_code == 200 and failed() == before + 1


def test_a_relay_that_fails_after_its_head_ends_the_stream_with_an_error_event(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay's stream raises once its status line and a chunk are out (a bug, not a provider's failure): the
    client should get the stream's last event, an error."""
    class Breaking(RelayedStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield CHUNK
            raise Bug("a bug")

    async def relay(body: bytes, **options: object) -> Relayed:
        return Relayed(stream=Breaking())

    monkeypatch.setattr(client.app_state["gateway"].upstreams.by_name["hosted"], "relay", relay)
    body = {"model": "hosted", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as answer:
        text = answer.read()
    assert text.startswith(CHUNK) and text.endswith(refusal_event(InternalError()))
