"""A pool at its in-flight cap: requests wait in a bounded queue shared fairly by tenants, and are
shed with 503 and Retry-After when the queue is full, a tenant is past its share, or the wait runs out."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx

from policies.refusals import Refused, Shed
from proxy.admission.pool_gate import PoolGate
from tests.support.clock import ClockedEngine, FakeClock, meanwhile, settle, settled
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum, wait_for_sample
from tests.support.waiting import wait_until

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


def test_a_queued_request_is_shed_when_the_clock_passes_the_queue_timeout(tmp_path: Path) -> None:
    """One slot, held by an answer that takes ten minutes of the app's clock: the request queued behind
    it is answered 503 queue_timeout as the clock passes the pool's queue_timeout (20 s), not before;
    the slot holder is answered, and the slot is free again once it is."""
    clock = FakeClock()
    engine = ClockedEngine(clock, head_s=600)
    config = {"pools": [pool("p", "http://p:8000/v1", max_in_flight=1, queue_size=4, queue_timeout=20,
                             timeouts={"first_byte": 3600, "total": 3600}, health={"interval": 0},
                             engine_metrics={"interval": 0})]}
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with in_memory_gateway(config, engine, clock, tmp_path) as client, meanwhile(clock) as background:
        gate = client.app_state["gateway"].upstreams.by_name["p"].gate
        first = background(client.post, "/v1/chat/completions", json=chat)
        wait_until(lambda: engine.posts == 1, timeout=10, what="the first request to take the slot")
        queued = background(client.post, "/v1/chat/completions", json=chat)
        wait_until(lambda: gate.queue.size == 1, timeout=10, what="the second request to wait in the queue")
        clock.advance(19.75)
        settled(client)
        assert gate.queue.size == 1 and not queued.done()
        clock.advance(0.25)
        waited = queued.result(timeout=10)
        assert waited.status_code == 503 and waited.json()["error"]["code"] == "queue_timeout"
        assert waited.headers["retry-after"] == "5"
        assert gate.queue.size == 0 and engine.posts == 1 and engine.given_up == []  # the first one still runs
        clock.advance(580)
        assert first.result(timeout=10).status_code == 200
        engine.head_s = 0
        assert client.post("/v1/chat/completions", json=chat).status_code == 200


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


async def test_a_waiter_displaced_as_its_wait_runs_out_is_shed_and_leaves_no_phantom_slot() -> None:
    """Two waiters of one tenant fill the queue; as their wait runs out, another tenant, under its share, takes
    the newest one's place in the same turn of the loop. That waiter is shed (it was not granted a slot), and
    once every slot is given back the pool counts none in flight: it admits no more than its cap."""
    clock = FakeClock()
    gate = PoolGate("p", capacity=1, queue_size=2, timeout=20, clock=clock)
    await gate.acquire("a")  # the one slot
    first, newest = (asyncio.ensure_future(gate.acquire("a")) for _ in range(2))
    await settle()
    assert gate.queue.size == 2
    clock.advance(20)  # both waits run out: their tasks are woken to time out ...
    other = asyncio.ensure_future(gate.acquire("b"))  # ... after b displaces the newest, in the same turn
    await settle()
    outcomes = await asyncio.gather(first, newest, return_exceptions=True)
    assert all(isinstance(outcome, Refused) and isinstance(outcome.refusal, Shed) for outcome in outcomes), outcomes
    reasons = [o.refusal.reason for o in outcomes if isinstance(o, Refused) and isinstance(o.refusal, Shed)]
    assert reasons == ["queue_timeout", "queue_share_exceeded"]  # the first timed out, the newest was displaced
    gate.release()  # the holder's slot goes to b
    await other
    gate.release()
    assert gate.in_flight == 0 and gate.queue.size == 0
    waiting = [asyncio.ensure_future(gate.acquire("c")) for _ in range(3)]  # the cap holds: one in, two wait
    await settle()
    assert gate.in_flight == 1 and gate.queue.size == 2
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
