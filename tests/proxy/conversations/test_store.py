"""Where stored responses live: this process's memory (each for ``responses.ttl_s``, the least recently
used dropped past ``responses.max_memory_mb``) or a real redis-server (shared, kept across a gateway's
restart, a 503 with Retry-After while it is down); each under its tenant, whatever the id."""

from __future__ import annotations

import logging
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from starlette.testclient import TestClient

from policies.prompt.responses import StoredResponse
from policies.refusals import Refused, StateUnavailable
from proxy.config.redis import RedisConfig
from proxy.conversations.store import ENTRY_OVERHEAD, OLD_REDIS_PREFIX, MemoryResponses, RedisResponses, _encode
from tests.support import fake_responses
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_transport import MockReply, MockUpstreams
from tests.support.redis_server import PATIENT_MS, RedisServer

DAY_S = 86_400.0
ACME, GLOBEX = "sk-acme-0123456789", "sk-globex-0123456789"


def stored(text: str = "Hello.", *, size: int = 0) -> StoredResponse:
    """A response as the gateway keeps one; ``size`` pads its text to that many characters."""
    text = text.ljust(size, ".")
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
    return StoredResponse([{"role": "user", "content": "Hi."}], output, {"id": "resp_x", "status": "completed",
                                                                          "output": output})


# ---- in memory ---------------------------------------------------------------------------------------------


async def test_a_response_in_memory_lasts_its_ttl_on_the_clock() -> None:
    clock = FakeClock()
    store = MemoryResponses(ttl_s=30 * DAY_S, max_bytes=1 << 20, clock=clock)
    await store.put("acme", "resp_1", stored())
    clock.advance(30 * DAY_S - 1)
    assert await store.get("acme", "resp_1") == stored()
    clock.advance(2)
    assert await store.get("acme", "resp_1") is None
    assert await store.delete("acme", "resp_1") is False


async def test_past_the_byte_bound_the_least_recently_used_response_goes_first() -> None:
    one = len(_encode(stored("a", size=1000))) + ENTRY_OVERHEAD
    store = MemoryResponses(ttl_s=DAY_S, max_bytes=3 * one, clock=FakeClock())
    for name in ("a", "b", "c"):
        await store.put("acme", f"resp_{name}", stored(name, size=1000))
    assert await store.get("acme", "resp_a") is not None  # read: now the most recently used
    await store.put("acme", "resp_d", stored("d", size=1000))
    assert await store.get("acme", "resp_b") is None  # the least recently used
    for name in ("a", "c", "d"):
        assert await store.get("acme", f"resp_{name}") == stored(name, size=1000)


async def test_the_memory_bound_bounds_what_the_process_holds() -> None:
    """``max_memory_mb`` is what the stored responses take in memory (traced), not the sum of their lengths:
    2 MB of tiny responses, of 600-byte ones or of 40 KB ones holds no more than about 2 MB."""
    bound = 2 << 20
    for size in (10, 600, 40_000):
        store = MemoryResponses(ttl_s=DAY_S, max_bytes=bound, clock=FakeClock())
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for n in range(3 * bound // (size + ENTRY_OVERHEAD)):
                await store.put("acme", f"resp_{n:032x}", stored(size=size))
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert len(store.entries) > bound // (size + 2 * ENTRY_OVERHEAD)  # it does fill up to the bound
        assert held < bound * 1.1, (size, held)


async def test_a_response_larger_than_the_whole_bound_is_not_kept(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryResponses(ttl_s=DAY_S, max_bytes=2000, clock=FakeClock())
    await store.put("acme", "resp_small", stored())
    with caplog.at_level(logging.WARNING, logger="prefixgate"):
        await store.put("acme", "resp_big", stored(size=5000))
    assert await store.get("acme", "resp_big") is None and "not stored" in caplog.text
    assert await store.get("acme", "resp_small") == stored()  # nothing else was pushed out for it


async def test_a_response_in_memory_is_its_tenants_alone() -> None:
    store = MemoryResponses(ttl_s=DAY_S, max_bytes=1 << 20, clock=FakeClock())
    await store.put("acme", "resp_1", stored())
    assert await store.get("globex", "resp_1") is None
    assert await store.delete("globex", "resp_1") is False
    assert await store.get("acme", "resp_1") == stored()
    await store.put("globex", "resp_1", stored("Globex's."))  # the same id under another tenant is another one
    assert await store.get("acme", "resp_1") == stored()
    assert await store.delete("acme", "resp_1") is True
    assert await store.get("acme", "resp_1") is None and await store.get("globex", "resp_1") == stored("Globex's.")


async def test_a_reader_cannot_change_what_is_stored() -> None:
    store = MemoryResponses(ttl_s=DAY_S, max_bytes=1 << 20, clock=FakeClock())
    await store.put("acme", "resp_1", stored())
    read = await store.get("acme", "resp_1")
    assert read is not None
    read.output.append({"type": "message", "role": "user", "content": "injected"})
    read.response["status"] = "failed"
    assert await store.get("acme", "resp_1") == stored()


# ---- in Redis ----------------------------------------------------------------------------------------------


@pytest.fixture
def settings(redis_server: RedisServer) -> RedisConfig:
    return RedisConfig(url=redis_server.url, timeout_ms=PATIENT_MS, retry_s=3)


async def test_redis_keeps_puts_gets_and_deletes_with_the_ttl(settings: RedisConfig) -> None:
    store = RedisResponses(settings, ttl_s=DAY_S)
    client = aioredis.from_url(settings.url)
    try:
        await store.put("acme", "resp_1", stored())
        assert await store.get("acme", "resp_1") == stored()
        keys = await client.keys("prefixgate:turns:*")
        assert len(keys) == 1 and 0 < await client.pttl(keys[0]) <= DAY_S * 1000
        assert await store.delete("acme", "resp_1") is True
        assert await store.get("acme", "resp_1") is None
        assert await store.delete("acme", "resp_1") is False
    finally:
        await client.aclose()
        await store.aclose()


async def test_redis_recalls_a_conversations_turns_in_one_trip_and_keeps_them_the_ttl_again(
        settings: RedisConfig) -> None:
    store = RedisResponses(settings, ttl_s=DAY_S)
    client = aioredis.from_url(settings.url)
    try:
        await store.put("acme", "resp_1", stored("One."))
        await store.put("acme", "resp_2", stored("Two."))
        for key in await client.keys("prefixgate:turns:*"):
            await client.pexpire(key, 5_000)  # as if written a day less five seconds ago
        assert await store.recall("acme", ("resp_1", "resp_gone", "resp_2")) == [stored("One."), None, stored("Two.")]
        assert await store.recall("acme", ()) == []
        for key in await client.keys("prefixgate:turns:*"):
            assert await client.pttl(key) > DAY_S * 1000 - 60_000  # a day again from the recall
    finally:
        await client.aclose()
        await store.aclose()


async def test_a_response_in_redis_is_its_tenants_alone(settings: RedisConfig) -> None:
    store = RedisResponses(settings, ttl_s=DAY_S)
    try:
        await store.put("acme", "resp_1", stored())
        assert await store.get("globex", "resp_1") is None
        assert await store.delete("globex", "resp_1") is False
        assert await store.get("acme", "resp_1") == stored()
        # a tenant name and an id that spell the same text another way are still another key
        await store.put("a:b", "c", stored("One."))
        assert await store.get("a", "b:c") is None and await store.get("a:b", "c") == stored("One.")
    finally:
        await store.aclose()


async def test_a_stopped_redis_is_refused_with_state_unavailable(settings: RedisConfig,
                                                                 redis_server: RedisServer) -> None:
    store = RedisResponses(settings, ttl_s=DAY_S)
    try:
        await store.put("acme", "resp_1", stored())
        redis_server.stop()
        for call in (store.get("acme", "resp_1"), store.put("acme", "resp_2", stored()),
                     store.delete("acme", "resp_1"), store.recall("acme", ("resp_1",))):
            with pytest.raises(Refused) as refused:
                await call
            assert refused.value.refusal == StateUnavailable(3)
    finally:
        await store.aclose()


# ---- through the gateway -----------------------------------------------------------------------------------


def engine(url: str, body: bytes) -> MockReply:
    """A vLLM answering the Responses API whole, each response with an id of its own."""
    return MockReply.json(fake_responses.response_object(orjson.loads(body), 4))


def gateway_config(**extra: Any) -> dict[str, Any]:
    quiet = {"models": ["m"], "health": {"interval": 0}, "engine_metrics": {"interval": 0}}
    return {"pools": [pool("p", "http://a:8000/v1", **quiet)],
            "auth": {"keys": [{"tenant": "acme", "key": ACME}, {"tenant": "globex", "key": GLOBEX}]}, **extra}


def create(client: TestClient, **fields: Any) -> Any:
    body = {"model": "m", "input": "Plan my day.", **fields}
    return client.post("/v1/responses", json=body, headers={"Authorization": f"Bearer {ACME}"})


def fetch(client: TestClient, response_id: str) -> Any:
    return client.get(f"/v1/responses/{response_id}", headers={"Authorization": f"Bearer {ACME}"})


@pytest.fixture
def upstreams() -> MockUpstreams:
    return MockUpstreams(engine)


def test_a_response_stored_in_redis_survives_a_gateway_restart(
        redis_server: RedisServer, upstreams: MockUpstreams, tmp_path: Path) -> None:
    config = gateway_config(redis={"url": redis_server.url, "timeout_ms": PATIENT_MS})
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        first = create(client)
        assert first.status_code == 200
    response_id = first.json()["id"]
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:  # a new process, the same Redis
        assert fetch(client, response_id).json() == first.json()
        second = create(client, input="And tomorrow?", previous_response_id=response_id)
        assert second.status_code == 200 and second.json()["previous_response_id"] == response_id
        sent = orjson.loads(upstreams.posts()[-1].body)["input"]
        assert sent[:-1] == [{"role": "user", "content": "Plan my day."}, *first.json()["output"]]


def test_without_redis_a_restart_forgets_and_the_ttl_runs_on_the_gateways_clock(
        upstreams: MockUpstreams, tmp_path: Path) -> None:
    config = gateway_config(responses={"ttl_s": 3600})
    clock = FakeClock()
    with in_memory_gateway(config, upstreams, clock, tmp_path) as client:
        response_id = create(client).json()["id"]
        clock.advance(3599)
        assert fetch(client, response_id).status_code == 200
        clock.advance(2)
        assert fetch(client, response_id).status_code == 404
        kept = create(client).json()["id"]
    with in_memory_gateway(config, upstreams, clock, tmp_path) as client:
        assert fetch(client, kept).status_code == 404


def test_with_redis_down_stored_responses_are_a_503_with_retry_after_and_new_ones_still_answered(
        redis_server: RedisServer, upstreams: MockUpstreams, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = gateway_config(redis={"url": redis_server.url, "timeout_ms": PATIENT_MS, "retry_s": 2.5})
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        response_id = create(client).json()["id"]
        redis_server.stop()
        answers = [fetch(client, response_id),
                   client.delete(f"/v1/responses/{response_id}", headers={"Authorization": f"Bearer {ACME}"}),
                   create(client, input="And tomorrow?", previous_response_id=response_id)]
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "response_store_unavailable"
            assert answer.headers["retry-after"] == "3"
        posts = len(upstreams.posts())
        with caplog.at_level(logging.WARNING, logger="prefixgate"):
            fresh = create(client, input="A new conversation.")  # needs nothing stored: answered, not kept
        assert fresh.status_code == 200 and len(upstreams.posts()) == posts + 1
        assert "answered but not stored" in caplog.text
        redis_server.start()  # same port, empty
        assert fetch(client, response_id).status_code == 404


async def test_redis_reads_responses_kept_in_the_older_form_and_writes_them_where_older_gateways_look_not(
        settings: RedisConfig) -> None:
    """A response kept before turns were linked (its whole conversation's input, under the older prefix) is read,
    continued and deleted; a linked turn is written under another prefix, so a gateway of the older form finds no
    response there (a 404) rather than taking one turn's input for the whole conversation."""
    store = RedisResponses(settings, ttl_s=DAY_S)
    client = aioredis.from_url(settings.url)
    try:
        old = RedisResponses.key("acme", "resp_old", OLD_REDIS_PREFIX)
        await client.set(old, orjson.dumps({"input": [{"role": "user", "content": "Hi."}],
                                            "response": stored().response}))
        assert await store.get("acme", "resp_old") == stored()
        assert await store.recall("acme", ("resp_old",)) == [stored()]
        await store.put("acme", "resp_new", stored("Two.")._replace(earlier=("resp_old",)))
        assert await client.exists(RedisResponses.key("acme", "resp_new", OLD_REDIS_PREFIX)) == 0
        assert 0 < await client.pttl(old) <= DAY_S * 1000  # kept as long as the turn that needs it
        assert await store.delete("acme", "resp_old") is True and await client.exists(old) == 0
    finally:
        await client.aclose()
        await store.aclose()
