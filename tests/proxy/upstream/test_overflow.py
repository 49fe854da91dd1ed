"""Pools of kind litellm, and overflow: what a local pool sheds goes to another pool (a hosted API
through litellm, here an OpenAI-compatible server litellm reaches through its openai provider)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from proxy.config.load import ConfigError, load_config
from proxy.engine.process import free_port
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.fake_upstream import FakeUpstream
from tests.support.metrics_text import sample_sum
from tests.support.servers import serve_in_thread


@pytest.fixture
def hosted() -> Iterator[FakeServer]:
    """The 'hosted API': a server of its own, so the test can tell which one answered."""
    app = FakeUpstream()
    with serve_in_thread(app) as url:
        yield FakeServer(url, app)


def hosted_pool(server: FakeServer, **extra: object) -> dict:
    return {"name": "hosted", "kind": "litellm", "models": ["big-model"], "litellm_model": "openai/fake-model",
            "api_base": server.base_url, "api_key": "sk-provider", **extra}


def test_a_litellm_pool_answers_in_openai_format(hosted: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [hosted_pool(hosted)]})
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="unused")
    answer = client.chat.completions.create(model="big-model", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=3)
    assert answer.choices[0].message.content and answer.usage is not None
    stream = client.chat.completions.create(model="big-model", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=4, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).count("tok") == 4
    assert hosted.app.stats.last_headers["authorization"] == "Bearer sk-provider"
    assert "cache_salt" not in hosted.app.stats.recent_bodies[-1]  # vLLM-only fields stay home


def test_a_provider_error_keeps_its_status(hosted: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [hosted_pool(hosted, litellm_model="openai/fake-400")]})
    answer = httpx.post(proxy + "/v1/chat/completions", timeout=30,
                        json={"model": "big-model", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 400
    assert "fake bad request" in answer.json()["error"]["message"]


def test_a_litellm_pool_makes_at_most_max_in_flight_provider_calls(hosted: FakeServer,
                                                                   start_proxy: Callable[..., str]) -> None:
    """One provider call at a time and no queue: of two streams at once (the provider waits a second before
    each one's first chunk), one is answered and the other shed at once."""
    capped = hosted_pool(hosted, litellm_model="openai/fake-slow-stream", max_in_flight=1, queue_size=0)
    proxy = start_proxy({"pools": [capped]})

    async def two() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "big-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                    "stream": True}
            return await asyncio.gather(*(client.post(proxy + "/v1/chat/completions", json=body) for _ in range(2)))

    answers = sorted(asyncio.run(two()), key=lambda answer: answer.status_code)
    assert [a.status_code for a in answers] == [200, 503]
    assert answers[0].text.rstrip().endswith("data: [DONE]") and answers[1].json()["error"]["code"] == "queue_full"


def test_what_a_saturated_pool_sheds_overflows(fake: FakeServer, hosted: FakeServer,
                                               start_proxy: Callable[..., str]) -> None:
    """One slot, no queue: of three requests at once, one runs locally and two go to the hosted pool."""
    local = pool("local", fake.base_url, models=["fake-model"], max_in_flight=1, queue_size=0, overflow_to="hosted")
    proxy = start_proxy({"pools": [local, hosted_pool(hosted)]})
    hosted_before = hosted.app.stats.completed

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "fake_tokens": 3,
                    "fake_delay_ms": 100}
            return await asyncio.gather(*(client.post(proxy + "/v1/chat/completions", json=body) for _ in range(3)))

    answers = asyncio.run(burst())
    assert [a.status_code for a in answers] == [200, 200, 200]
    overflowed = [a for a in answers if a.headers.get("x-prefixgate-overflow") == "local"]
    assert len(overflowed) == 2 and all(a.headers["x-prefixgate-pool"] == "hosted" for a in overflowed)
    assert hosted.app.stats.completed - hosted_before == 2
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_shed_total", pool="local", reason="queue_full_overflowed") == 2
    assert sample_sum(metrics, "prefixgate_pool_choices_total", reason="overflow") == 2


def test_a_pool_with_no_live_replica_overflows(hosted: FakeServer, start_proxy: Callable[..., str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    local = pool("local", dead, models=["fake-model"], overflow_to="hosted", health={"eject_after": 1})
    proxy = start_proxy({"pools": [local, hosted_pool(hosted)]})
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    first = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=30)
    assert first.status_code == 502  # the refused connection ejects the replica
    second = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=30)
    assert second.status_code == 200 and second.headers["x-prefixgate-overflow"] == "local"


# litellm reads pydantic's model_fields and model_computed_fields off an instance when it relays a usage chunk
@pytest.mark.filterwarnings("ignore:Accessing the 'model_(computed_)?fields' attribute:DeprecationWarning")
def test_a_stream_that_overflows_to_a_litellm_pool_is_planned_for_it(hosted: FakeServer,
                                                                     start_proxy: Callable[..., str]) -> None:
    """The gateway asks vLLM for a stream's usage and hides the event from a client that did not ask for it;
    litellm counts usage itself and relays every event it gets. A stream that overflows to a litellm pool
    is planned for that pool, so the provider is not asked for usage the client did not ask for either."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    local = pool("local", dead, models=["fake-model"], overflow_to="hosted", health={"eject_after": 1})
    proxy = start_proxy({"pools": [local, hosted_pool(hosted)]})
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True}
    assert httpx.post(proxy + "/v1/chat/completions", json=body, timeout=30).status_code == 502  # ejected
    for asked in (False, True):
        extra = {"stream_options": {"include_usage": True}} if asked else {}
        with httpx.stream("POST", proxy + "/v1/chat/completions", json={**body, **extra}, timeout=30) as answer:
            events = [line for line in answer.iter_lines() if line.startswith("data: ")]
        assert answer.status_code == 200 and answer.headers["x-prefixgate-overflow"] == "local"
        sent = hosted.app.stats.recent_bodies[-1]
        assert bool((sent.get("stream_options") or {}).get("include_usage")) is asked
        chunks = [orjson.loads(event[6:]) for event in events[:-1]]
        assert events[-1] == "data: [DONE]" and "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")).count("tok") == 3
        assert any(chunk.get("usage") for chunk in chunks) is asked


@pytest.mark.parametrize(("pools", "fragment"), [
    ([{"name": "a", "replicas": ["http://x/v1"], "overflow_to": "nowhere"}], "overflow_to names no other pool"),
    ([{"name": "a", "replicas": ["http://x/v1"], "overflow_to": "a"}], "overflow_to names no other pool"),
    ([{"name": "a", "kind": "litellm", "replicas": ["http://x/v1"]}],
     "pools[0]: Value error, replicas is a field of pools of kind openai; pool 'a' is of kind litellm"),
    ([{"name": "a", "replicas": ["http://x/v1"], "litellm_model": "openai/x"}],
     "litellm_model is a field of pools of kind litellm; pool 'a' is of kind openai"),
    ([{"name": "a", "kind": "litellm", "litelm_model": "openai/x"}], "pools[0].litelm_model: Extra inputs"),
    ([{"name": "a", "kind": "vllm", "replicas": ["http://x/v1"]}], "pools[0]: kind must be one of: openai, litellm"),
])
def test_pool_kind_and_overflow_mistakes_are_named(tmp_path: Path, pools: list, fragment: str) -> None:
    import yaml

    path = tmp_path / "prefixgate.yaml"
    path.write_text(yaml.safe_dump({"pools": pools}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert fragment in str(caught.value) and "pools" in str(caught.value)
