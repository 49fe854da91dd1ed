"""Retrieval through the gateway with the real parts: MiniLM embeddings and Qdrant in local mode.

Two tenants hold documents on the same topics with different facts (30 vs 60 days to return an
item), so a passage that crosses tenants shows up as the wrong number in the upstream's prompt
(tests/support/tenant_corpus.py; the ``corpus`` fixture, in tests/proxy/conftest.py, ingests them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from policies.retrieval.evidence import FOOTER, HEADER
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.servers import free_port
from tests.support.tenant_corpus import KEYS, config


def ask(gateway: str, tenant: str, question: str, **headers: str) -> httpx.Response:
    body = {"model": "fake-model", "max_tokens": 4, "messages": [
        {"role": "system", "content": "You answer customer questions."},
        {"role": "user", "content": question},
    ]}
    return httpx.post(gateway + "/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {KEYS[tenant]}", **headers})


def test_each_tenant_gets_its_own_passages_before_the_question(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path
) -> None:
    gateway = start_proxy(config(fake, corpus))
    for tenant, right, wrong in (("acme", "30 days", "60 days"), ("globex", "60 days", "30 days")):
        answer = ask(gateway, tenant, "How long do I have to return an item?")
        assert answer.status_code == 200
        assert int(answer.headers["x-prefixgate-passages"]) >= 1
        assert "embed;dur=" in answer.headers["server-timing"]
        sent = fake.app.stats.last_body
        assert sent["messages"][0] == {"role": "system", "content": "You answer customer questions."}
        user = sent["messages"][1]["content"]
        assert user.startswith(HEADER + "\n\n[1] ")
        assert user.endswith(FOOTER + "\n\nHow long do I have to return an item?")
        assert right in user and wrong not in user


def test_a_messages_request_gets_its_tenants_passages_before_its_last_user_turn(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path
) -> None:
    """The Messages API (Claude Code, the Anthropic SDKs) retrieves as chat does: the tenant's own passages lead
    the last user turn, the system text and earlier turns stay as sent, and a key as ``x-api-key`` finds the
    tenant."""
    gateway = start_proxy(config(fake, corpus))
    earlier = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    for tenant, right, wrong in (("acme", "30 days", "60 days"), ("globex", "60 days", "30 days")):
        body = {"model": "fake-model", "max_tokens": 4, "system": "You answer customer questions.", "messages": [
            *earlier, {"role": "user", "content": [{"type": "text", "text": "How long do I have to return an item?"}]}]}
        answer = httpx.post(gateway + "/v1/messages", json=body, timeout=30, headers={"x-api-key": KEYS[tenant]})
        assert answer.status_code == 200 and answer.json()["type"] == "message"
        assert int(answer.headers["x-prefixgate-passages"]) >= 1
        sent = fake.app.stats.last_body
        assert sent["system"] == "You answer customer questions." and sent["messages"][:2] == earlier
        text = "".join(block["text"] for block in sent["messages"][2]["content"])
        assert text.startswith(HEADER + "\n\n[1] ")
        assert text.endswith("How long do I have to return an item?")
        assert right in text and wrong not in text


def test_html_is_ingested_as_its_visible_text(fake: FakeServer, start_proxy: Callable[..., str], corpus: Path) -> None:
    gateway = start_proxy(config(fake, corpus, top_n=1))
    ask(gateway, "acme", "Is motor failure of my blender covered?")
    user = fake.app.stats.last_body["messages"][1]["content"]
    assert "two-year warranty" in user and "track()" not in user and "<p>" not in user


def test_concurrent_tenants_never_see_each_others_passages(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path
) -> None:
    gateway = start_proxy(config(fake, corpus))

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = []
            for n in range(24):
                tenant = "acme" if n % 2 else "globex"
                body = {"model": "fake-model", "max_tokens": 2,
                        "messages": [{"role": "user", "content": f"Return window for item {n} ({tenant})?"}]}
                calls.append(client.post(gateway + "/v1/chat/completions", json=body,
                                         headers={"Authorization": f"Bearer {KEYS[tenant]}"}))
            return await asyncio.gather(*calls)

    fake.app.stats.recent_bodies.clear()
    for _ in range(2):  # the second round runs with everything warm
        assert all(answer.status_code == 200 for answer in asyncio.run(burst()))
    bodies = list(fake.app.stats.recent_bodies)
    assert len(bodies) == 48
    for body in bodies:
        text = body["messages"][-1]["content"]
        tenant = "acme" if text.endswith("(acme)?") else "globex"
        assert HEADER in text
        assert ("60 days" not in text) if tenant == "acme" else ("30 days" not in text and "Acme" not in text)
    metrics = httpx.get(gateway + "/metrics").text
    batches = [line for line in metrics.splitlines() if line.startswith("prefixgate_embedding_batch_size_count")]
    assert batches and float(batches[0].split()[-1]) < 48  # concurrent questions shared embedding calls


def test_the_opt_out_header_sends_the_request_unchanged(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path
) -> None:
    gateway = start_proxy(config(fake, corpus))
    answer = ask(gateway, "acme", "How long do I have to return an item?", **{"x-prefixgate-retrieval": "off"})
    assert "x-prefixgate-passages" not in answer.headers
    assert fake.app.stats.last_body["messages"][1]["content"] == "How long do I have to return an item?"


def test_a_missing_collection_answers_without_context(
    fake: FakeServer, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    gateway = start_proxy(config(fake, tmp_path))  # nothing ingested here: the collection does not exist
    answer = ask(gateway, "globex", "When is support open?")
    assert answer.status_code == 200 and answer.headers["x-prefixgate-passages"] == "error"
    assert fake.app.stats.last_body["messages"][1]["content"] == "When is support open?"
    assert "prefixgate_retrieval_failures_total 1.0" in httpx.get(gateway + "/metrics").text


def test_pdf_text_is_ingested_and_retrieved(fake: FakeServer, start_proxy: Callable[..., str], corpus: Path) -> None:
    gateway = start_proxy(config(fake, corpus, top_n=1))
    ask(gateway, "globex", "How do I reset my router?")
    user = fake.app.stats.last_body["messages"][1]["content"]
    assert "hold the back button for ten seconds" in user and "router-manual.pdf (chunk" in user


def test_a_repeated_question_is_answered_from_the_passage_cache(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path
) -> None:
    gateway = start_proxy(config(fake, corpus))
    first = ask(gateway, "acme", "How fast is express delivery?")
    sent_first = fake.app.stats.last_body["messages"][1]["content"]
    again = ask(gateway, "acme", "how fast is  express delivery?")
    assert "embed;dur=" in first.headers["server-timing"] and again.headers["server-timing"].startswith("cache;dur=")
    assert fake.app.stats.last_body["messages"][1]["content"].split(FOOTER)[0] == sent_first.split(FOOTER)[0]
    metrics = httpx.get(gateway + "/metrics").text
    assert 'prefixgate_retrieval_cache_total{result="hit"} 1.0' in metrics


def test_when_the_model_cannot_answer_the_passages_come_back_instead_of_an_error(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path
) -> None:
    data = config(fake, corpus, fallback=True)
    data["pools"] = [pool("p", fake.base_url, models=["fake-model", "fake-hang"], timeouts={"first_byte": 0.5})]
    gateway = start_proxy(data)
    question = {"role": "user", "content": "How long do I have to return an item?"}
    headers = {"Authorization": f"Bearer {KEYS['acme']}"}
    answer = httpx.post(gateway + "/v1/chat/completions", headers=headers, timeout=30,
                        json={"model": "fake-hang", "messages": [question]})
    assert answer.status_code == 200 and answer.headers["x-prefixgate-degraded"] == "upstream_timeout"
    # what the steps before the failure reported stays on the answer: the prompt's rewrite, the passages
    assert int(answer.headers["x-prefixgate-passages"]) > 0 and answer.headers["x-prefixgate-volatile"] == "0"
    completion = answer.json()
    assert completion["object"] == "chat.completion" and completion["choices"][0]["finish_reason"] == "stop"
    assert "30 days" in completion["choices"][0]["message"]["content"]
    streamed = httpx.post(gateway + "/v1/chat/completions", headers=headers, timeout=30,
                          json={"model": "fake-hang", "messages": [question], "stream": True})
    events = [line for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and "30 days" in streamed.text
    assert streamed.headers["content-type"].startswith("text/event-stream")


@pytest.mark.parametrize(("fallback", "status"), [(False, 502), (True, 200)])
def test_an_unreachable_model_is_an_error_unless_the_tenant_asked_for_the_fallback(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path, fallback: bool, status: int
) -> None:
    data = config(fake, corpus, fallback=fallback)
    data["pools"] = [pool("p", "http://127.0.0.1:9/v1", models=["fake-model"])]
    answer = ask(start_proxy(data), "globex", "When is support open?")
    assert answer.status_code == status
    if fallback:
        assert answer.headers["x-prefixgate-degraded"] == "upstream_connect"
        assert "weekdays" in answer.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize(("fallback", "status"), [(False, 503), (True, 200)])
def test_with_every_replica_ejected_the_passages_answer_at_once(
    fake: FakeServer, start_proxy: Callable[..., str], corpus: Path, fallback: bool, status: int
) -> None:
    data = config(fake, corpus, fallback=fallback)
    data["pools"] = [pool("p", "http://127.0.0.1:9/v1", models=["fake-model"],
                          health={"eject_after": 1, "backoff": 30})]
    gateway = start_proxy(data)
    ask(gateway, "globex", "When is support open?")  # the failure that ejects the only replica
    answer = ask(gateway, "globex", "Where do returns go?")
    assert answer.status_code == status
    if fallback:
        assert answer.headers["x-prefixgate-degraded"] == "no_healthy_upstream"
    else:
        assert answer.json()["error"]["code"] == "no_healthy_upstream"


# qdrant-client checks the server's version from a thread at start-up and warns when it cannot.
@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_an_unreachable_qdrant_server_costs_the_context_not_the_answer(
    fake: FakeServer, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    """The server path (gRPC client) with nothing listening: the request goes on without context."""
    data = config(fake, tmp_path)
    data["retrieval"] = {"qdrant_url": f"http://127.0.0.1:{free_port()}", "qdrant_grpc_port": free_port(), "timeout": 2,
                         "embeddings_url": fake.base_url, "embeddings_model": "fake-model",
                         "embeddings_dimensions": 3}
    gateway = start_proxy(data)
    started = time.monotonic()
    answer = ask(gateway, "acme", "How long do I have to return an item?")
    assert answer.status_code == 200 and answer.headers["x-prefixgate-passages"] == "error"
    assert time.monotonic() - started < 5
    assert fake.app.stats.last_body["messages"][1]["content"] == "How long do I have to return an item?"
    assert 'prefixgate_retrieval_failures_total 1.0' in httpx.get(gateway + "/metrics").text
