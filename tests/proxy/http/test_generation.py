"""The generation route's steps in memory: what the upstream receives, what a client is refused, what it replays."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from policies.prompt.cache_salt import tenant_salt
from policies.prompt.prompt import NOTE_HEADER
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockUpstreams

A, B = "http://a:8000/v1", "http://b:8000/v1"
ACME, GLOBEX = "sk-acme-0123456789", "sk-globex-0123456789"
SECRET = "salt-secret-0123456789"
SYSTEM = "You are a planner.  \r\nCurrent time: 2026-11-22 11:51:13 UTC\r\nPlan well."
USAGE_EVENT = b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],' \
              b'"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}\n\n'


@pytest.fixture
def upstreams() -> MockUpstreams:
    """A vLLM that streams when asked (with its usage event when asked) and else answers whole."""
    return MockUpstreams(MockEngine("hello", prompt_tokens=11, completion_tokens=7))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def client(upstreams: MockUpstreams, clock: FakeClock, tmp_path: Path) -> Iterator[TestClient]:
    quiet = {"models": ["m"], "health": {"interval": 0}, "engine_metrics": {"interval": 0}}
    config = {
        "pools": [pool("p", A, **quiet), pool("q", B, **quiet)],
        "auth": {"keys": [{"tenant": "acme", "key": ACME}, {"tenant": "globex", "key": GLOBEX}],
                 "cache_salt_secret": SECRET},
        "tenants": {"acme": {"answer_cache": {"ttl_s": 600}}},
    }
    with in_memory_gateway(config, upstreams, clock, tmp_path) as client:
        yield client


def _chat(client: TestClient, key: str | None = ACME, headers: dict[str, str] | None = None,
          **extra: Any) -> httpx.Response:
    body = {"model": "m", "max_tokens": 4, "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Plan my day."}], **extra}
    auth = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return client.post("/v1/chat/completions", json=body, headers={**auth, **(headers or {})})


def _sent(upstreams: MockUpstreams, index: int = -1) -> dict[str, Any]:
    return orjson.loads(upstreams.posts()[index].body)


def test_the_upstream_receives_the_canonical_prompt_and_the_tenants_own_salt(client: TestClient,
                                                                              upstreams: MockUpstreams) -> None:
    answer = _chat(client)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "hello"
    assert answer.headers["x-prefixgate-relocated"] == "1"
    sent = _sent(upstreams)
    assert sent["messages"][0]["content"] == "You are a planner.\nPlan well."
    assert sent["messages"][1]["content"] == f"Plan my day.\n\n{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC"
    assert sent["cache_salt"] == tenant_salt(SECRET.encode(), "acme")  # an HMAC under the secret
    assert "acme" not in sent["cache_salt"]
    assert _chat(client, GLOBEX).status_code == 200
    assert _sent(upstreams)["cache_salt"] == tenant_salt(SECRET.encode(), "globex") != sent["cache_salt"]


def test_a_stream_is_asked_for_its_usage_which_a_client_that_did_not_ask_never_sees(
        client: TestClient, upstreams: MockUpstreams) -> None:
    answer = _chat(client, stream=True)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    assert _sent(upstreams)["stream_options"] == {"include_usage": True}
    assert b'"content":"hello"' in answer.content and answer.content.endswith(b"data: [DONE]\n\n")
    assert b'"usage"' not in answer.content
    metrics = client.get("/metrics").text  # counted from the hidden event, not from the two content events
    assert sample_sum(metrics, "prefixgate_tokens_total", tenant="acme", kind="completion") == 7
    asked = _chat(client, stream=True, stream_options={"include_usage": True})
    assert USAGE_EVENT in asked.content


def test_a_named_pool_takes_the_request_and_the_answer_names_it(client: TestClient,
                                                                 upstreams: MockUpstreams) -> None:
    plain = _chat(client)
    assert upstreams.posts()[-1].url.startswith(A) and "x-prefixgate-pool" not in plain.headers
    named = _chat(client, headers={"x-prefixgate-pool": "q"})
    assert named.status_code == 200 and named.headers["x-prefixgate-pool"] == "q"
    assert upstreams.posts()[-1].url == B + "/chat/completions"


@pytest.mark.parametrize(("key", "headers", "extra", "status", "param", "code"), [
    (None, {}, {}, 401, None, "missing_api_key"),
    ("sk-nobody-0123456789", {}, {}, 401, None, "invalid_api_key"),
    (ACME, {}, {"model": "gpt-9"}, 404, "model", "model_not_found"),
    (ACME, {}, {"max_tokens": -1}, 400, "max_tokens", None),
    (ACME, {"x-prefixgate-pool": "huge"}, {}, 400, "x-prefixgate-pool", "unknown_pool"),
], ids=["no key", "wrong key", "unknown model", "invalid field", "unknown pool"])
def test_a_refused_request_gets_an_openai_error_and_never_reaches_the_upstream(
        client: TestClient, upstreams: MockUpstreams, key: str | None, headers: dict[str, str],
        extra: dict[str, Any], status: int, param: str | None, code: str | None) -> None:
    answer = _chat(client, key, headers, **extra)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param and error["code"] == code
    assert upstreams.posts() == []


def test_a_key_sent_as_x_api_key_finds_its_tenant_as_a_bearer_key_does(client: TestClient) -> None:
    """Anthropic's clients send their key as ``x-api-key``: it finds the same tenant (acme stores deterministic
    answers, globex does not) on the generation and the light routes; ``Authorization`` wins where both come."""
    as_header = _chat(client, None, {"x-api-key": ACME}, temperature=0)
    assert as_header.status_code == 200 and as_header.headers["x-prefixgate-answer-cache"] == "miss"
    both = _chat(client, GLOBEX, {"x-api-key": ACME}, temperature=0)
    assert both.status_code == 200 and "x-prefixgate-answer-cache" not in both.headers
    wrong = _chat(client, None, {"x-api-key": "sk-nobody-0123456789"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert client.get("/v1/models", headers={"x-api-key": GLOBEX}).status_code == 200
    missing = client.get("/v1/models")
    assert missing.status_code == 401 and "x-api-key" in missing.json()["error"]["message"]


def test_an_exact_deterministic_repeat_is_answered_from_the_answer_cache(client: TestClient, clock: FakeClock,
                                                                         upstreams: MockUpstreams) -> None:
    first = _chat(client, temperature=0)
    assert first.headers["x-prefixgate-answer-cache"] == "miss"
    again = _chat(client, temperature=0)
    assert again.headers["x-prefixgate-answer-cache"] == "hit" and again.json() == first.json()
    replayed = _chat(client, temperature=0, stream=True)  # the stored answer, as the engine would stream it
    assert replayed.headers["x-prefixgate-answer-cache"] == "hit" and b'"content":"hello"' in replayed.content
    assert len(upstreams.posts()) == 1
    clock.advance(601)  # past tenants.acme.answer_cache.ttl_s
    assert _chat(client, temperature=0).headers["x-prefixgate-answer-cache"] == "miss"
    assert len(upstreams.posts()) == 2


def test_only_deterministic_requests_of_tenants_that_store_answers_are_replayed(
        client: TestClient, upstreams: MockUpstreams) -> None:
    for _ in range(2):
        assert "x-prefixgate-answer-cache" not in _chat(client, temperature=0.7).headers
        assert "x-prefixgate-answer-cache" not in _chat(client, GLOBEX, temperature=0).headers
    assert len(upstreams.posts()) == 4


def test_a_stray_input_field_does_not_lift_the_output_cap(upstreams: MockUpstreams, clock: FakeClock,
                                                          tmp_path: Path) -> None:
    """The output cap follows the endpoint: ``"input"`` in a chat or completions body (which their engines
    ignore) neither hides ``max_tokens`` from the tenant's cap nor from the rate limits' reservation."""
    quiet = {"models": ["m"], "health": {"interval": 0}, "engine_metrics": {"interval": 0}}
    config = {"pools": [pool("p", A, **quiet)],
              "auth": {"keys": [{"tenant": "acme", "key": ACME}, {"tenant": "globex", "key": GLOBEX}]},
              "tenants": {"acme": {"limits": {"max_tokens": 64, "max_tokens_action": "reject"}},
                          "globex": {"limits": {"max_tokens": 64, "tokens_per_minute": 1000}}}}
    bodies = {"/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
              "/v1/completions": {"model": "m", "prompt": "Once"}}
    with in_memory_gateway(config, upstreams, clock, tmp_path) as client:
        for path, body in bodies.items():
            stray = {**body, "max_tokens": 100000, "input": 0}
            sent = len(upstreams.posts())
            refused = client.post(path, json=stray, headers={"Authorization": f"Bearer {ACME}"})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["param"] == "max_tokens"
            assert len(upstreams.posts()) == sent
            clamped = client.post(path, json=stray, headers={"Authorization": f"Bearer {GLOBEX}"})
            assert clamped.status_code == 200, clamped.text
            assert _sent(upstreams)["max_tokens"] == 64
            # the reservation is the prompt plus the 64 admitted, not 100,000 (which would not fit 1,000)
            assert int(clamped.headers["x-ratelimit-remaining-tokens"]) > 1000 - 64 - 50
