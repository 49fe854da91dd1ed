"""Replica choice, retries and back-off driven in memory: upstreams answer through the transport seam
and time moves with the clock seam, so a 30 s back-off runs out at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.transports.base import UpstreamUnreachable
from tests.support.clock import FakeClock
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_engine import chat_completion
from tests.support.mock_transport import MockReply, MockUpstreams

A, B = "http://a:8000/v1", "http://b:8000/v1"
CHAT = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hello"}]}


def _pool(**extra: object) -> dict[str, object]:
    return {"pools": [{"name": "p", "replicas": [A, B], "models": ["m"], "balance": "least_loaded",
                       "engine_metrics": {"interval": 0}, "health": {"interval": 0}, **extra}]}


class Replicas:
    """Replica a is down until ``a_up``; b always answers."""

    def __init__(self) -> None:
        self.a_up = False

    def __call__(self, url: str, body: bytes) -> MockReply:
        if url.startswith(A) and not self.a_up:
            raise UpstreamUnreachable("connection refused")
        return chat_completion()


@pytest.fixture
def replicas() -> Replicas:
    return Replicas()


def test_a_refused_connection_is_retried_on_the_other_replica(replicas: Replicas, tmp_path: Path) -> None:
    upstreams = MockUpstreams(replicas)
    settings = _pool(retries=1, health={"interval": 0, "eject_after": 1, "backoff": 30.0})
    with in_memory_gateway(settings, upstreams, FakeClock(), tmp_path) as client:
        statuses = [client.post("/v1/chat/completions", json=CHAT).status_code for _ in range(4)]
    assert statuses == [200] * 4
    posts = [call.url.removesuffix("/chat/completions") for call in upstreams.posts()]
    assert posts.count(B) == 4 and posts.count(A) == 1  # a refused once, then was ejected


def test_an_ejected_replica_gets_its_half_open_probe_when_the_back_off_runs_out(replicas: Replicas,
                                                                                tmp_path: Path) -> None:
    upstreams, clock = MockUpstreams(replicas), FakeClock()
    settings = _pool(retries=0, health={"interval": 0, "eject_after": 1, "backoff": 30.0})
    with in_memory_gateway(settings, upstreams, clock, tmp_path) as client:

        def ask() -> int:
            return client.post("/v1/chat/completions", json=CHAT).status_code

        first = [ask() for _ in range(2)]  # least_loaded takes turns: one of the two goes to a and fails
        assert sorted(first) == [200, 502]
        replicas.a_up = True
        clock.advance(29.0)
        assert [ask() for _ in range(4)] == [200] * 4
        assert not any(call.url.startswith(A) for call in upstreams.posts()[2:])  # still ejected
        clock.advance(1.5)  # past the back-off: a is half-open, and its probe succeeds
        assert [ask() for _ in range(4)] == [200] * 4
        assert sum(call.url.startswith(A) for call in upstreams.posts()[6:]) >= 1


def test_with_every_replica_ejected_retry_after_counts_down_on_the_clock(tmp_path: Path) -> None:
    def down(url: str, body: bytes) -> MockReply:
        raise UpstreamUnreachable("connection refused")

    clock = FakeClock()
    settings = _pool(retries=1, health={"interval": 0, "eject_after": 1, "backoff": 30.0})
    with in_memory_gateway(settings, MockUpstreams(down), clock, tmp_path) as client:
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 502  # both refused: both ejected
        clock.advance(12.0)
        shed = client.post("/v1/chat/completions", json=CHAT)
    assert shed.status_code == 503 and shed.json()["error"]["code"] == "no_healthy_upstream"
    assert shed.headers["retry-after"] == "18"
