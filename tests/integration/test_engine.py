"""User-facing paths through prefixgate to a real vLLM CPU engine, started as a user starts it:
``prefixgate serve`` with no upstream configured (the embedded default)."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import openai
import orjson
import pytest

from tests.support.dashboard import dashboard_metrics
from tests.support.embedded import Embedded
from tests.support.metrics_text import exposed_names, sample_sum

pytestmark = pytest.mark.engine

MESSAGES = [{"role": "user", "content": "Say something about prefix caching."}]


def client(embedded: Embedded) -> openai.OpenAI:
    return openai.OpenAI(base_url=embedded.proxy + "/v1", api_key="unused-in-open-mode", max_retries=0)


def test_sdk_sync_non_streaming(embedded: Embedded) -> None:
    answer = client(embedded).chat.completions.create(
        model=embedded.model, messages=MESSAGES, max_tokens=8, extra_body={"ignore_eos": True}
    )
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content
    assert answer.usage.completion_tokens == 8 and answer.usage.prompt_tokens > 0


def test_sdk_sync_streaming_with_usage(embedded: Embedded) -> None:
    stream = client(embedded).chat.completions.create(
        model=embedded.model, messages=MESSAGES, max_tokens=6, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


async def test_sdk_async_streaming_and_non_streaming(embedded: Embedded) -> None:
    async_client = openai.AsyncOpenAI(base_url=embedded.proxy + "/v1", api_key="x", max_retries=0)
    whole, stream = await asyncio.gather(
        async_client.chat.completions.create(model=embedded.model, messages=MESSAGES, max_tokens=4),
        async_client.chat.completions.create(model=embedded.model, messages=MESSAGES, max_tokens=4, stream=True),
    )
    assert whole.usage.total_tokens > 0
    pieces = [chunk async for chunk in stream]
    assert pieces and pieces[0].object == "chat.completion.chunk"
    await async_client.close()


def test_sdk_completions_and_models(embedded: Embedded) -> None:
    sdk = client(embedded)
    answer = sdk.completions.create(model=embedded.model, prompt="Once upon a time", max_tokens=5,
                                    extra_body={"ignore_eos": True})
    assert answer.choices[0].text and answer.usage.completion_tokens == 5
    assert [m.id for m in sdk.models.list()] == [embedded.model]
    listing = httpx.get(embedded.proxy + "/v1/models").text
    assert str(embedded.data_dir) not in listing  # the engine reports its model's path as `root`; clients never see it


def test_raw_http_like_curl(embedded: Embedded) -> None:
    body = {"model": embedded.model, "messages": MESSAGES, "max_tokens": 4, "stream": True}
    response = httpx.post(embedded.proxy + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    data = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert all(orjson.loads(item)["object"] == "chat.completion.chunk" for item in data[:-1])


def test_stream_through_proxy_matches_engine_framing(embedded: Embedded) -> None:
    body = {"model": embedded.model, "messages": MESSAGES, "max_tokens": 5, "stream": True, "seed": 1,
            "temperature": 0, "ignore_eos": True}
    direct = httpx.post(embedded.engine + "/v1/chat/completions", json=body, timeout=30).text
    proxied = httpx.post(embedded.proxy + "/v1/chat/completions", json=body, timeout=30).text

    def content(text: str) -> str:
        items = [orjson.loads(x[6:]) for x in text.split("\n\n") if x.startswith("data: {")]
        return "".join(c["choices"][0]["delta"].get("content", "") for c in items if c["choices"])

    assert content(proxied) == content(direct)  # greedy decoding: the same tokens either way
    assert proxied.endswith("data: [DONE]\n\n")


def test_engine_errors_pass_through(embedded: Embedded) -> None:
    # more log-probabilities than the engine gives (a cap above its context the gateway lowers to fit instead)
    too_many = {"model": embedded.model, "messages": MESSAGES, "max_tokens": 4, "logprobs": True,
                "top_logprobs": 1000}
    direct = httpx.post(embedded.engine + "/v1/chat/completions", json=too_many, timeout=30)
    proxied = httpx.post(embedded.proxy + "/v1/chat/completions", json=too_many, timeout=30)
    assert proxied.status_code == direct.status_code == 400
    assert proxied.json() == direct.json()
    unknown = httpx.post(embedded.proxy + "/v1/chat/completions", json={**too_many, "model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def _running(embedded: Embedded) -> float:
    return sample_sum(httpx.get(embedded.engine + "/metrics").text, "vllm:num_requests_running")


def test_client_disconnect_aborts_the_engine_request(embedded: Embedded) -> None:
    body = orjson.dumps({"model": embedded.model, "messages": MESSAGES, "max_tokens": 3500,
                         "ignore_eos": True, "stream": True})
    port = int(embedded.proxy.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        received = b""
        while received.count(b"data: ") < 5:
            received += sock.recv(65536)
        seen = time.monotonic()
        while _running(embedded) != 1:  # the engine's gauge follows its steps; give it a moment
            assert time.monotonic() - seen < 5, "the engine does not report the streaming request as running"
            time.sleep(0.05)
    closed = time.monotonic()
    while _running(embedded) != 0:
        assert time.monotonic() - closed < 1.0, "engine still running the request 1 s after the client left"
        time.sleep(0.02)


def test_ready_and_metrics_after_real_traffic(embedded: Embedded) -> None:
    ready = httpx.get(embedded.proxy + "/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    httpx.post(embedded.proxy + "/v1/chat/completions",
               json={"model": embedded.model, "messages": MESSAGES, "max_tokens": 2, "stream": True}, timeout=30)
    text = httpx.get(embedded.proxy + "/metrics").text
    assert sample_sum(text, "prefixgate_time_to_first_token_seconds_count", route="/chat/completions") >= 1
    assert sample_sum(text, "prefixgate_requests_total", route="/chat/completions", status="200") >= 1


def test_the_dashboard_queries_metrics_the_real_engine_and_gateway_expose(embedded: Embedded) -> None:
    """deploy/grafana's panels on vLLM (running, waiting, KV usage, preemptions, prefix-cache hits)
    read names this engine's /metrics has; its TPOT and token panels read prefixgate's, after traffic."""
    client(embedded).chat.completions.create(model=embedded.model, messages=MESSAGES, max_tokens=4, stream=True,
                                             extra_body={"ignore_eos": True}).close()
    engine = exposed_names(httpx.get(embedded.engine + "/metrics", timeout=10).text)
    wanted = dashboard_metrics("vllm:")
    assert len(wanted) >= 5
    assert wanted <= engine, sorted(wanted - engine)
    gateway = exposed_names(httpx.get(embedded.proxy + "/metrics", timeout=10).text)
    assert dashboard_metrics("prefixgate_") <= gateway


def test_prefixgate_reads_each_replicas_engine_from_its_metrics(embedded: Embedded) -> None:
    """The engine's prefix-cache hit rate, KV usage and scheduler counts, read from its /metrics on an
    interval, show on prefixgate's /metrics for its replica; requests that share a long start hit."""
    system = "You answer questions about the ACME warehouse. " * 60  # several 128-token blocks
    for turn in range(3):
        client(embedded).chat.completions.create(
            model=embedded.model, max_tokens=2,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": f"question {turn}"}])
    deadline = time.monotonic() + 15
    while True:
        text = httpx.get(embedded.proxy + "/metrics", timeout=10).text
        if sample_sum(text, "prefixgate_engine_prefix_cache_hit_rate") > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    replica = embedded.engine + "/v1"
    assert sample_sum(text, "prefixgate_engine_up", replica=replica) == 1
    assert 0 < sample_sum(text, "prefixgate_engine_prefix_cache_hit_rate", replica=replica) <= 1
    assert 0 <= sample_sum(text, "prefixgate_engine_kv_cache_usage", replica=replica) <= 1
    assert sample_sum(text, "prefixgate_engine_others_requests", replica=replica) == 0  # prefixgate sent them all
    engine = httpx.get(embedded.engine + "/metrics", timeout=10).text
    assert (sample_sum(text, "prefixgate_engine_preemptions_total", replica=replica)
            == sample_sum(engine, "vllm:num_preemptions_total"))


def test_engine_sees_the_canonical_prefix_and_the_tail_note(embedded: Embedded) -> None:
    """vLLM reports back the prompt it rendered (prompt_logprobs): the volatile line left the system
    prompt and arrived, intact, after the user's question."""
    system = "You are a planner.\nCurrent time: 2026-11-22 11:51:13 UTC\nPlan carefully."
    answer = httpx.post(embedded.proxy + "/v1/chat/completions", json={
        "model": embedded.model, "max_tokens": 1, "prompt_logprobs": 0,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "What first?"}],
    }, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-prefixgate-relocated"] == "1"
    tokens = answer.json()["prompt_logprobs"]
    rendered = "".join(next(iter(entry.values()))["decoded_token"] for entry in tokens if entry)
    system_at = rendered.index("You are a planner.\nPlan carefully.")
    question_at = rendered.index("What first?")
    note_at = rendered.index("Current time: 2026-11-22 11:51:13 UTC")
    assert system_at < question_at < note_at
