"""The non-generation endpoints: models, embeddings, health, readiness, metrics."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import sample_sum
from tests.support.servers import free_port

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def test_models_is_the_union_of_pools(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    gateway = start_proxy({"pools": [
        pool("discovered", fake.base_url),  # no models declared: learns them from the replica
        pool("declared", dead, models=["big-model", "fake-model"]),
    ]})
    answer = httpx.get(gateway + "/v1/models")
    assert answer.status_code == 200
    listing = answer.json()
    assert listing["object"] == "list"
    ids = [card["id"] for card in listing["data"]]
    assert len(ids) == len(set(ids))
    assert {"fake-model", "fake-hang", "big-model"} <= set(ids)
    for card in listing["data"]:
        assert card["object"] == "model" and isinstance(card["created"], int) and card["owned_by"]
    assert "/srv/models" not in answer.text  # the engine's disk layout stays with the engine
    assert next(card for card in listing["data"] if card["id"] == "fake-model")["root"] == "fake-model"


def test_model_routes_to_the_pool_that_serves_it(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    gateway = start_proxy({"pools": [pool("declared", dead, models=["big-model"]), pool("live", fake.base_url)]})
    assert httpx.post(gateway + "/v1/chat/completions", json=CHAT).status_code == 200
    assert httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": "big-model"}).status_code == 502
    assert httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": "nope"}).status_code == 404


def test_embeddings_pass_through(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    gateway = start_proxy({"pools": [pool("chat", dead, models=["llm"])],
                           "embeddings": {"replicas": [fake.base_url], "models": ["minilm"]}})
    body = {"model": "minilm", "input": ["a", "b"]}
    direct = httpx.post(fake.base_url + "/embeddings", json=body)
    proxied = httpx.post(gateway + "/v1/embeddings", json=body)
    assert proxied.status_code == 200 and proxied.content == direct.content
    assert len(proxied.json()["data"]) == 2
    assert httpx.post(gateway + "/v1/embeddings", json={"model": "minilm"}).json()["error"]["param"] == "input"


def test_health_and_readiness(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    up = start_proxy({"pools": [pool("a", fake.base_url, dead)]})
    down = start_proxy({"pools": [pool("a", dead)]})
    assert httpx.get(up + "/health").json() == {"status": "ok"}
    assert httpx.get(down + "/health").status_code == 200  # alive even with nothing behind it
    ready = httpx.get(up + "/ready")
    assert ready.status_code == 200
    assert ready.json()["replicas"] == {fake.base_url: True, dead: False}
    assert httpx.get(down + "/ready").status_code == 503


def test_metrics_count_requests_ttft_and_upstream_errors(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    gateway = start_proxy({"pools": [pool("live", fake.base_url, models=["fake-model"]),
                                     pool("gone", dead, models=["lost"])]})
    httpx.post(gateway + "/v1/chat/completions", json=CHAT)
    httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "stream": True})
    httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "model": "lost"})
    httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "max_tokens": "x"})
    text = httpx.get(gateway + "/metrics").text
    route = "/chat/completions"
    assert sample_sum(text, "prefixgate_requests_total", route=route, status="200") == 2
    assert sample_sum(text, "prefixgate_requests_total", route=route, status="502") == 1
    assert sample_sum(text, "prefixgate_requests_total", route=route, status="400") == 1
    assert sample_sum(text, "prefixgate_request_duration_seconds_count", route=route, status="200") == 2
    assert sample_sum(text, "prefixgate_time_to_first_token_seconds_count", route=route) == 1
    assert sample_sum(text, "prefixgate_upstream_errors_total", pool="gone", replica=dead, kind="connect") == 1


def test_models_requires_a_key_when_keys_are_set(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({"auth": {"keys": [{"tenant": "t", "key": "sk-tenant-t-123"}]},
                           "pools": [pool("a", fake.base_url)]})
    assert httpx.get(gateway + "/v1/models").status_code == 401
    ok = httpx.get(gateway + "/v1/models", headers={"Authorization": "Bearer sk-tenant-t-123"})
    assert ok.status_code == 200
