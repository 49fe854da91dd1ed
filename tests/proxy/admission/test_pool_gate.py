"""A pool at its in-flight cap: requests wait in a bounded queue shared fairly by tenants, and are
shed with 503 and Retry-After when the queue is full, a tenant is past its share, or the wait runs out."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import httpx

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import sample_sum, wait_for_sample

KEYS = {"greedy": "sk-greedy-tenant-1", "modest": "sk-modest-tenant-1"}


def config(fake: FakeServer, **gate: object) -> dict:
    return {"pools": [pool("p", fake.base_url, **gate)],
            "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()]}}


def slow_chat(tokens: int = 3, delay_ms: int = 150) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "fake_tokens": tokens,
            "fake_delay_ms": delay_ms}


async def ask(client: httpx.AsyncClient, proxy: str, tenant: str, body: dict) -> httpx.Response:
    return await client.post(proxy + "/v1/chat/completions", json=body,
                              headers={"Authorization": f"Bearer {KEYS[tenant]}"})


def test_a_greedy_tenant_cannot_keep_another_out_of_the_queue(
    fake: FakeServer, start_proxy: Callable[..., str]
) -> None:
    """One slot, four places. The greedy tenant sends 8 requests at once: one runs, four wait, three
    are shed. The modest tenant then sends 2: they take the places of the greedy tenant's newest two
    waiters (it is past its share of 2 now) and both are answered."""
    proxy = start_proxy(config(fake, max_in_flight=1, queue_size=4, queue_timeout=30))

    async def scenario() -> tuple[list[httpx.Response], list[httpx.Response]]:
        async with httpx.AsyncClient(timeout=60) as client:
            greedy = [asyncio.create_task(ask(client, proxy, "greedy", slow_chat())) for _ in range(8)]
            # the greedy burst is placed: four wait, three are shed
            await wait_for_sample(client, proxy, "prefixgate_pool_queued", 4, pool="p")
            await wait_for_sample(client, proxy, "prefixgate_shed_total", 3, pool="p", reason="queue_full")
            modest = [asyncio.create_task(ask(client, proxy, "modest", slow_chat())) for _ in range(2)]
            return await asyncio.gather(*greedy), await asyncio.gather(*modest)

    greedy, modest = asyncio.run(scenario())
    assert [a.status_code for a in modest] == [200, 200]
    codes = Counter(a.json()["error"]["code"] for a in greedy if a.status_code == 503)
    assert Counter(a.status_code for a in greedy) == {200: 3, 503: 5}, codes
    assert codes == {"queue_full": 3, "queue_share_exceeded": 2}
    assert all(int(a.headers["retry-after"]) >= 1 for a in greedy if a.status_code == 503)
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_shed_total", pool="p", reason="queue_full") == 3
    assert sample_sum(metrics, "prefixgate_shed_total", pool="p", reason="queue_share_exceeded") == 2
    assert sample_sum(metrics, "prefixgate_queue_wait_seconds_count", pool="p") == 10


def test_a_wait_past_the_queue_timeout_is_answered_503(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(config(fake, max_in_flight=1, queue_size=4, queue_timeout=0.3))

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            first = asyncio.create_task(ask(client, proxy, "greedy", slow_chat(tokens=10, delay_ms=100)))
            await wait_for_sample(client, proxy, "prefixgate_replica_in_flight", 1, pool="p")  # the slot is taken
            return [await ask(client, proxy, "modest", slow_chat(tokens=1, delay_ms=1)), await first]

    waited, first = asyncio.run(scenario())
    assert first.status_code == 200
    assert waited.status_code == 503 and waited.json()["error"]["code"] == "queue_timeout"
    assert "retry-after" in waited.headers
    # the slot is free again once the long one ended
    assert httpx.post(proxy + "/v1/chat/completions", json=slow_chat(1, 1),
                      headers={"Authorization": f"Bearer {KEYS['modest']}"}).status_code == 200


def test_under_the_cap_requests_do_not_wait(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(config(fake, max_in_flight=4, queue_size=0))

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(ask(client, proxy, "greedy", slow_chat()) for _ in range(4)))

    assert [a.status_code for a in asyncio.run(scenario())] == [200] * 4
    shed = asyncio.run(_burst_over(proxy))
    assert Counter(shed) == {200: 4, 503: 2}


async def _burst_over(proxy: str) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as client:
        return [a.status_code for a in await asyncio.gather(*(ask(client, proxy, "greedy", slow_chat())
                                                               for _ in range(6)))]


def test_a_client_that_leaves_the_queue_frees_its_place(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    """One slot, one place: the waiter gives up, so the next request may wait instead of being shed.
    Meanwhile /metrics shows the load: one request in flight, one queued."""
    proxy = start_proxy(config(fake, max_in_flight=1, queue_size=1, queue_timeout=30))

    async def scenario() -> tuple[int, str, int]:
        completed = fake.app.stats.completed
        async with httpx.AsyncClient(timeout=60) as client:
            running = asyncio.create_task(ask(client, proxy, "greedy", slow_chat(tokens=6, delay_ms=100)))
            await wait_for_sample(client, proxy, "prefixgate_replica_in_flight", 1, pool="p")
            leaving = asyncio.create_task(ask(client, proxy, "greedy", slow_chat()))
            load = await wait_for_sample(client, proxy, "prefixgate_pool_queued", 1, pool="p")
            leaving.cancel()  # the client closes its connection while queued
            await wait_for_sample(client, proxy, "prefixgate_pool_queued", 0, pool="p")  # its place is free
            after = await ask(client, proxy, "greedy", slow_chat(tokens=1, delay_ms=1))
            assert (await running).status_code == 200
            return after.status_code, load, fake.app.stats.completed - completed

    status, load, completed = asyncio.run(scenario())
    assert status == 200
    assert completed == 2  # the one that left never reached the engine
    assert sample_sum(load, "prefixgate_replica_in_flight", pool="p") == 1
    assert sample_sum(load, "prefixgate_pool_queued", pool="p") == 1
    assert sample_sum(load, "prefixgate_replica_healthy", pool="p") == 1
