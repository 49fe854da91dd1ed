"""Caches shared by gateway replicas through a real redis-server, and what an outage does to them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import redis.asyncio as aioredis

from policies.retrieval.evidence import Passage
from proxy.caches.tiered import TieredCache, tiered_cache
from proxy.clock import SYSTEM_CLOCK
from proxy.config.redis import RedisConfig
from proxy.retrieval.passage_cache import RetrievalCache
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import sample_sum
from tests.support.redis_server import PATIENT_MS, RedisServer

KEY = "sk-acme-shared-cache-1"


def gateway_config(fake: FakeServer, redis_url: str, **redis: Any) -> dict[str, Any]:
    return {
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "auth": {"keys": [{"tenant": "acme", "key": KEY}]},
        "tenants": {"acme": {"answer_cache": {"ttl_s": 60}}},
        "redis": {"url": redis_url, "timeout_ms": PATIENT_MS, "retry_s": 0.3, **redis},
    }


def ask(gateway: str, question: str = "Name three colours.", timeout: float = 30) -> httpx.Response:
    payload = {"model": "fake-model", "max_tokens": 3, "temperature": 0,
               "messages": [{"role": "user", "content": question}]}
    return httpx.post(gateway + "/v1/chat/completions", json=payload, timeout=timeout,
                      headers={"Authorization": f"Bearer {KEY}"})


def shared_events(gateway: str, event: str) -> float:
    return sample_sum(httpx.get(gateway + "/metrics").text, "prefixgate_shared_cache_total",
                      cache="answers", event=event)


def test_an_answer_stored_through_one_replica_is_a_hit_on_another(
    fake: FakeServer, start_proxy: Callable[..., str], redis_server: RedisServer
) -> None:
    first, second = (start_proxy(gateway_config(fake, redis_server.url)) for _ in range(2))
    stored = ask(first)
    assert stored.status_code == 200 and stored.headers["x-prefixgate-answer-cache"] == "miss"
    seen = fake.app.stats.requests
    replayed = ask(second)
    assert replayed.headers["x-prefixgate-answer-cache"] == "hit" and replayed.json() == stored.json()
    assert fake.app.stats.requests == seen
    assert shared_events(second, "shared_hit") == 1


def test_with_redis_gone_answers_still_flow_and_sharing_resumes_when_it_returns(
    fake: FakeServer, start_proxy: Callable[..., str], redis_server: RedisServer
) -> None:
    clock = FakeClock()  # the pause after a failed Redis call (retry_s) runs on it
    first, second = (start_proxy(gateway_config(fake, redis_server.url), clock=clock) for _ in range(2))
    redis_server.stop()
    assert ask(first).headers["x-prefixgate-answer-cache"] == "miss"
    assert ask(first).headers["x-prefixgate-answer-cache"] == "hit"  # kept in process meanwhile
    assert shared_events(first, "error") >= 1
    redis_server.start()  # same port, empty
    clock.advance(0.4)  # past retry_s
    assert ask(first, "Name two rivers.").headers["x-prefixgate-answer-cache"] == "miss"
    assert ask(second, "Name two rivers.").headers["x-prefixgate-answer-cache"] == "hit"


def test_a_redis_that_stops_answering_costs_one_timeout_then_nothing(
    fake: FakeServer, start_proxy: Callable[..., str], redis_server: RedisServer
) -> None:
    gateway = start_proxy(gateway_config(fake, redis_server.url, timeout_ms=100, retry_s=30))
    assert ask(gateway, "Warm the connection.").status_code == 200
    redis_server.freeze()
    try:
        started = time.monotonic()
        assert ask(gateway, timeout=10).status_code == 200  # read times out (100 ms), then the model answers
        first = time.monotonic() - started
        later = [ask(gateway, "Name a planet.", timeout=10) for _ in range(5)]
    finally:
        redis_server.thaw()
    assert first < 2.0, first  # one read timeout of 100 ms, not a client library's default of seconds
    # Then nothing: the breaker keeps later requests off Redis (no second timeout, counted as an error),
    # and the in-process tier serves them. (How long they take is the machine's business: on a busy 2-core
    # machine an answer through this gateway takes 0.1 to 0.3 s with Redis healthy too.)
    assert [answer.status_code for answer in later] == [200] * 5
    assert [answer.headers["x-prefixgate-answer-cache"] for answer in later] == ["miss"] + ["hit"] * 4
    assert shared_events(gateway, "error") == 1


def test_front_tier_entries_are_short_lived_and_redis_keeps_the_full_ttl(redis_server: RedisServer) -> None:
    async def run() -> None:
        events: list[str] = []
        settings = RedisConfig(url=redis_server.url, timeout_ms=PATIENT_MS, front_ttl_s=0.1)
        clock = FakeClock()
        writer = tiered_cache(settings, "answers", clock=clock)
        reader = tiered_cache(settings, "answers", clock=clock)
        client = aioredis.from_url(redis_server.url)
        try:
            reader.on_event = events.append
            await writer.put("k", {"answer": 42}, ttl=60)
            assert await reader.get("k") == {"answer": 42} and events == ["shared_hit"]
            assert await reader.get("k") == {"answer": 42} and events == ["shared_hit"]  # from its front tier
            assert 59_000 < await client.pttl("prefixgate:answers:k") <= 60_000
            await client.delete("prefixgate:answers:k")
            clock.advance(0.15)
            assert await reader.get("k") is None and await writer.get("k") is None  # both front tiers expired
        finally:
            await client.aclose()
            await writer.aclose()
            await reader.aclose()

    asyncio.run(run())


def test_passages_survive_the_round_trip_through_redis(redis_server: RedisServer) -> None:
    async def run() -> None:
        settings = RedisConfig(url=redis_server.url, timeout_ms=PATIENT_MS)
        one = RetrievalCache(ttl=60, empty_ttl=5,
                             store=tiered_cache(settings, "passages", clock=SYSTEM_CLOCK))
        other = RetrievalCache(ttl=60, empty_ttl=5,
                               store=tiered_cache(settings, "passages", clock=SYSTEM_CLOCK))
        passages = (Passage("guide.md", 0, 2, "Chunks zero to two.", 0.83, "docs/guide.md", 5, end=120),
                    Passage("faq.md", 3, 3, "One chunk, no offsets.", 0.5, "faq.md", 6))
        try:
            await one.put("q", passages)
            await one.put("nothing", ())
            assert await other.get("q") == passages
            assert await other.get("nothing") == ()  # an empty result is a hit too, not a miss
        finally:
            await one.aclose()
            await other.aclose()

    asyncio.run(run())


def test_without_redis_the_in_process_tier_keeps_entries_for_their_whole_ttl() -> None:
    async def run() -> None:
        clock = FakeClock()
        cache = TieredCache(front_ttl=0.01, clock=clock)
        await cache.put("k", "v", ttl=60)
        clock.advance(59.9)
        assert await cache.get("k") == "v" and not cache.shared
        clock.advance(0.2)
        assert await cache.get("k") is None

    asyncio.run(run())
