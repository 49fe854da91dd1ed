"""The upstream call in memory: a slot or the overflow pool, 503 with no healthy replica, admission settled once.

Starlette's TestClient hands back a response once its headers are out and runs the app on only as the
test reads the body, so a stream left unread holds its pool's slot while the test sends another request.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from proxy.transports.base import UpstreamUnreachable
from tests.support.chat_body import chat_body
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockReply, MockUpstreams

A, B = "http://a:8000/v1", "http://b:8000/v1"
KEY = "sk-acme-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
_body = partial(chat_body, max_tokens=8)


def _pool(name: str, replica: str, model: str, **extra: Any) -> dict[str, Any]:
    quiet = {"health": {"interval": 0}, "engine_metrics": {"interval": 0}}  # no checks or readings of their own
    return pool(name, replica, models=[model], **{**quiet, **extra})


def _limited(pools: list[dict[str, Any]]) -> dict[str, Any]:
    """acme may send 100,000 tokens a minute."""
    return {"pools": pools, "auth": {"keys": [{"tenant": "acme", "key": KEY}]},
            "tenants": {"acme": {"limits": {"tokens_per_minute": 100_000}}}}


def _remaining(answer: Any) -> int:
    return int(answer.headers["x-ratelimit-remaining-tokens"])


def test_a_request_the_full_pool_sheds_goes_to_its_overflow_pool_and_the_answer_says_so(tmp_path: Path) -> None:
    upstreams = MockUpstreams(MockEngine())
    local = _pool("local", A, "m", max_in_flight=1, queue_size=0, overflow_to="big")
    with in_memory_gateway({"pools": [local, _pool("big", B, "big-model")]}, upstreams, FakeClock(),
                           tmp_path) as client:
        with client.stream("POST", "/v1/chat/completions", json=_body(stream=True)) as holding:
            assert holding.status_code == 200  # local's one slot, held until the stream is read
            shed = client.post("/v1/chat/completions", json=_body())
            during = client.get("/metrics").text
            holding.read()
        assert shed.status_code == 200
        assert shed.headers["x-prefixgate-pool"] == "big" and shed.headers["x-prefixgate-overflow"] == "local"
        assert [call.url for call in upstreams.posts()] == [A + "/chat/completions", B + "/chat/completions"]
        later = client.post("/v1/chat/completions", json=_body())  # the slot was given back
        assert later.status_code == 200 and "x-prefixgate-overflow" not in later.headers
        assert upstreams.posts()[-1].url.startswith(A)
        metrics = client.get("/metrics").text
    assert sample_sum(metrics, "prefixgate_shed_total", pool="local", reason="queue_full_overflowed") == 1
    assert sample_sum(during, "prefixgate_replica_in_flight", pool="local") == 1
    assert sample_sum(metrics, "prefixgate_replica_in_flight") == 0  # every replica given back


def test_a_pool_with_every_replica_ejected_answers_503_no_healthy_upstream_with_retry_after(tmp_path: Path) -> None:
    def down(url: str, body: bytes) -> MockReply:
        raise UpstreamUnreachable("connection refused")

    upstreams, clock = MockUpstreams(down), FakeClock()
    p = _pool("p", A, "m", retries=0, health={"interval": 0, "eject_after": 1, "backoff": 30.0})
    with in_memory_gateway({"pools": [p]}, upstreams, clock, tmp_path) as client:
        assert client.post("/v1/chat/completions", json=_body()).status_code == 502  # refused: ejected
        clock.advance(10.0)
        shed = client.post("/v1/chat/completions", json=_body())
    assert shed.status_code == 503 and shed.headers["retry-after"] == "20"
    assert shed.json()["error"]["code"] == "no_healthy_upstream"
    assert shed.json()["error"]["type"] == "service_unavailable"
    assert len(upstreams.posts()) == 1  # the ejected replica was not asked again


def test_an_answer_settles_the_tenants_tokens_with_the_usage_the_upstream_reported(tmp_path: Path) -> None:
    with in_memory_gateway(_limited([_pool("p", A, "m")]), MockUpstreams(MockEngine()), FakeClock(),
                           tmp_path) as client:
        first, second = (client.post("/v1/chat/completions", json=_body(), headers=AUTH) for _ in range(2))
    assert first.status_code == second.status_code == 200
    # both reserved the same; by the second, the first's reservation was replaced by its usage, 5 + 1
    assert _remaining(first) - _remaining(second) == 6


def test_a_shed_request_gives_its_tokens_back(tmp_path: Path) -> None:
    solo = _pool("p", A, "m", max_in_flight=1, queue_size=0)
    engine = MockEngine(prompt_tokens=11, completion_tokens=7)
    with in_memory_gateway(_limited([solo]), MockUpstreams(engine), FakeClock(), tmp_path) as client:
        with client.stream("POST", "/v1/chat/completions", json=_body(stream=True), headers=AUTH) as holding:
            shed = client.post("/v1/chat/completions", json=_body(stream=True), headers=AUTH)
            assert b'"usage"' not in holding.read()  # the gateway asked for it; the client did not
        later = client.post("/v1/chat/completions", json=_body(stream=True), headers=AUTH)
    assert shed.status_code == 503 and shed.json()["error"]["code"] == "queue_full"
    assert "retry-after" in shed.headers
    # the stream counts its usage event's 11 + 7 tokens; the shed request counts none
    assert _remaining(holding) - _remaining(later) == 18
