"""KV-cache events from the real engine: the index built from them holds exactly the blocks of the prompts
the engine cached, keyed so that a request's own tokens find them, salt included.

The engine (the ``embedded`` fixture's) publishes its events on a ZeroMQ socket; ``EventFeed`` receives
them as the gateway does. The prompt's tokens come from ``PromptTokens`` with the model's own files, and
are compared with what the engine says it tokenized (/tokenize) as well as with its blocks.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import httpx
import pytest
import zmq.asyncio

from policies.prompt.cache_salt import tenant_salt
from policies.routing.kv_blocks import HeldBlocks, block_keys
from proxy.kv_events.prompt_tokens import PromptTokens
from proxy.kv_events.subscriber import EventFeed
from tests.support.configs import pool
from tests.support.embedded import Embedded
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until, wait_until_async

pytestmark = pytest.mark.engine

KEYS = {"alpha": "key-alpha-123", "beta": "key-beta-4567"}
SECRET = "kv-events-test-salt-secret"


def system_prompt(words: int) -> str:
    """Rules long enough for several of the engine's blocks (128 tokens on the CPU)."""
    topic = "".join(random.choice("klmnoprstuvwxyz") for _ in range(8))  # fresh text, no ID-like runs
    return " ".join(f"Rule {n} of {topic}: answer in plain words about item {n * 7}." for n in range(words // 10))


async def ask(client: httpx.AsyncClient, embedded: Embedded, messages: list[dict], salt: str | None) -> None:
    body = {"model": embedded.model, "messages": messages, "max_tokens": 1, **({"cache_salt": salt} if salt else {})}
    answer = await client.post(embedded.engine + "/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text


async def test_the_index_holds_the_engines_blocks_for_the_requests_own_tokens(embedded: Embedded) -> None:
    async with httpx.AsyncClient() as client:
        sources = (await client.get(embedded.engine + "/kv_event_sources")).json()
        assert next(iter(sources.values()))["topic"] == "kv"  # the engine names where its events go
        index = HeldBlocks(1)
        feed = EventFeed(0, embedded.kv_events, index, topic="kv", replay=embedded.kv_replay)
        context = zmq.asyncio.Context()
        listening = asyncio.create_task(feed.run(context))
        try:
            messages = [{"role": "system", "content": system_prompt(600)}, {"role": "user", "content": "Hello?"}]
            tokens = PromptTokens(str(embedded.model_folder)).of_chat(messages)
            engine_tokens = (await client.post(embedded.engine + "/tokenize",
                                               json={"model": embedded.model, "messages": messages})).json()["tokens"]
            assert tokens == engine_tokens

            # a SUB socket receives only what is published after it connected: send until a batch arrives
            async def stored() -> bool:
                await ask(client, embedded, messages, "tenant-a")
                return feed.state.batches > 0 and index.size(0) > 0

            await wait_until_async(stored, timeout=30, interval=0.2, what="the engine's first events")
            block = feed.state.block_size
            assert block is not None
            keys = block_keys(tokens, block, "tenant-a")
            assert len(keys) >= 3
            assert index.held(keys) == [len(keys)]  # every full block of the prompt, found from its tokens
            assert index.held(block_keys(tokens, block, "tenant-b")) == [0]  # another salt: not this prefix
            assert index.held(block_keys(tokens, block, None)) == [0]

            unsalted = [{"role": "system", "content": system_prompt(600)}, {"role": "user", "content": "Hi"}]
            await ask(client, embedded, unsalted, None)
            other = block_keys(PromptTokens(str(embedded.model_folder)).of_chat(unsalted), block, None)
            await wait_until_async(lambda: index.held(other) == [len(other)], timeout=10, interval=0.1,
                                   what="the unsalted prompt's blocks")
            assert feed.state.missed == 0 and feed.state.undecodable == 0
        finally:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
            context.term()


def test_the_gateway_sends_a_prompt_to_the_replica_whose_engine_holds_it(
        embedded: Embedded, fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    """A pool of the real engine and a fake one (which publishes nothing): prompts the engine holds for a
    tenant go to it whatever the ring says; another tenant's same prompt is not held (its salt differs). The
    admin's /admin/route says so before each choice is made."""
    gateway = start_proxy({
        "pools": [pool("engines", embedded.engine + "/v1", fake.base_url, models=[embedded.model],
                       balance="kv_events", kv_events={"tokenizer": str(embedded.model_folder)})],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()], "cache_salt_secret": SECRET},
    })
    alpha_salt = tenant_salt(SECRET.encode(), "alpha")
    prompts = [[{"role": "system", "content": system_prompt(400)}, {"role": "user", "content": "Hi"}] for _ in range(6)]

    def index_blocks() -> float:
        text = httpx.get(gateway + "/metrics").text
        return sample_sum(text, "prefixgate_kv_index_blocks", pool="engines", replica=embedded.engine + "/v1")

    def warmed() -> bool:  # cached at the engine under alpha's salt, until the gateway's feed has seen them
        for messages in prompts:
            body = {"model": embedded.model, "messages": messages, "max_tokens": 1, "cache_salt": alpha_salt}
            assert httpx.post(embedded.engine + "/v1/chat/completions", json=body, timeout=60).status_code == 200
        return index_blocks() >= 6 * 3

    wait_until(warmed, timeout=60, interval=0.2, what="the gateway's index of the engine's blocks")

    def ask(tenant: str, messages: list[dict]) -> int:
        answer = httpx.post(gateway + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEYS[tenant]}"},
                            json={"model": embedded.model, "messages": messages, "max_tokens": 1}, timeout=60)
        return answer.status_code

    def explain(tenant: str, messages: list[dict]) -> dict:
        return httpx.post(gateway + "/admin/route/v1/chat/completions", headers={"x-prefixgate-tenant": tenant},
                          json={"model": embedded.model, "messages": messages, "max_tokens": 1}, timeout=60).json()

    for messages in prompts:  # the admin's view of the choice, before it is made: held there, by how much
        said = explain("alpha", messages)
        assert (said["replica"], said["reason"]) == (embedded.engine + "/v1", "held")
        assert said["replicas"][0]["held_tokens"] >= 3 * 128 and said["replicas"][1]["held_tokens"] == 0
        assert [r["held_tokens"] for r in explain("beta", messages)["replicas"]] == [0, 0]
    assert [ask("alpha", messages) for messages in prompts] == [200] * len(prompts)
    metrics = httpx.get(gateway + "/metrics").text
    held = sample_sum(metrics, "prefixgate_replica_choices_total", pool="engines", reason="held")
    assert held == len(prompts)  # all of them to the engine that holds them, not half to the ring's pick
    assert sample_sum(metrics, "prefixgate_replica_choices_total", replica=embedded.engine + "/v1") == len(prompts)
    assert sample_sum(metrics, "prefixgate_kv_held_tokens_count", pool="engines") == len(prompts)
    assert sample_sum(metrics, "prefixgate_kv_held_tokens_sum", pool="engines") >= len(prompts) * 3 * 128
    for messages in prompts:  # the same prompts under beta's salt: held nowhere, so by the ring (the fake
        ask("beta", messages)  # replica answers 404 for the tiny model: only the choice counts here)
    after = sample_sum(httpx.get(gateway + "/metrics").text, "prefixgate_replica_choices_total", reason="held")
    assert after == held
