"""Whole-answer reuse for tenants that opt in: exact deterministic repeats never reach a replica."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.answers.answer_cache import answer_key, cacheable, completion_from_stream, stream_from_completion
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_transport import MockReply, MockUpstreams

KEYS = {"acme": "sk-acme-answers-1", "globex": "sk-globex-answers-1"}


def start(fake: FakeServer, start_proxy: Callable[..., str]) -> str:
    return start_proxy({
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()]},
        "tenants": {"acme": {"answer_cache": {"ttl_s": 60}}},
    })


def post(gateway: str, tenant: str, **body: object) -> httpx.Response:
    payload = {"model": "fake-model", "max_tokens": 3, "temperature": 0,
               "messages": [{"role": "user", "content": "Name three colours."}], **body}
    return httpx.post(gateway + "/v1/chat/completions", json=payload, timeout=30,
                      headers={"Authorization": f"Bearer {KEYS[tenant]}"})


def test_an_exact_repeat_is_replayed_as_json_and_as_a_stream(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start(fake, start_proxy)
    first = post(gateway, "acme")
    assert first.headers["x-prefixgate-answer-cache"] == "miss"
    seen = fake.app.stats.requests
    again = post(gateway, "acme")
    assert again.headers["x-prefixgate-answer-cache"] == "hit" and again.json() == first.json()
    streamed = post(gateway, "acme", stream=True, stream_options={"include_usage": True})
    assert streamed.headers["x-prefixgate-answer-cache"] == "hit"
    assert streamed.headers["content-type"].startswith("text/event-stream")
    replay = completion_from_stream(streamed.content)
    assert replay is not None
    assert replay["choices"] == first.json()["choices"] and replay["usage"] == first.json()["usage"]
    assert fake.app.stats.requests == seen  # neither repeat reached the upstream


def test_a_streamed_answer_is_stored_and_replayed_to_a_json_request(
    fake: FakeServer, start_proxy: Callable[..., str]
) -> None:
    gateway = start(fake, start_proxy)
    streamed = post(gateway, "acme", max_tokens=5, stream=True)
    assert streamed.headers["x-prefixgate-answer-cache"] == "miss" and streamed.text.endswith("data: [DONE]\n\n")
    again = post(gateway, "acme", max_tokens=5)
    assert again.headers["x-prefixgate-answer-cache"] == "hit"
    assert again.json()["choices"][0]["message"]["content"] == " tok" * 5


def test_sampling_other_tenants_and_different_requests_are_not_served_from_it(
    fake: FakeServer, start_proxy: Callable[..., str]
) -> None:
    gateway = start(fake, start_proxy)
    post(gateway, "acme")
    assert "x-prefixgate-answer-cache" not in post(gateway, "acme", temperature=0.7).headers
    assert "x-prefixgate-answer-cache" not in post(gateway, "globex").headers  # globex did not opt in
    assert post(gateway, "acme", max_tokens=4).headers["x-prefixgate-answer-cache"] == "miss"


def test_only_deterministic_single_answers_qualify() -> None:
    base = {"model": "m", "messages": [], "temperature": 0}
    assert cacheable(base)
    assert not cacheable({**base, "temperature": 0.2}) and not cacheable({k: v for k, v in base.items()
                                                                          if k != "temperature"})
    assert not cacheable({**base, "n": 2}) and not cacheable({**base, "tools": [{"type": "function"}]})
    assert answer_key("a", base) == answer_key("a", {**base, "stream": True, "user": "u1"})
    assert answer_key("a", base) != answer_key("b", base)


_texts = st.builds(
    lambda text, finish, usage: {
        "id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage, "completion_tokens": 2, "total_tokens": usage + 2},
    },
    st.text(max_size=200), st.sampled_from(["stop", "length"]), st.integers(0, 1000),
)
_completions = st.builds(
    lambda text, finish, usage: {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                     "finish_reason": finish}],
        "usage": {"prompt_tokens": usage, "completion_tokens": 2, "total_tokens": usage + 2},
    },
    st.text(max_size=200), st.sampled_from(["stop", "length"]), st.integers(0, 1000),
)


@given(_completions | _texts)
def test_a_replayed_stream_adds_up_to_the_stored_answer(completion: dict) -> None:
    stream = stream_from_completion(completion, include_usage=True)
    assert all(orjson.loads(line[6:]) for line in stream.split(b"\n") if line.startswith(b"data: {"))
    assert completion_from_stream(stream) == completion


# ---- /v1/completions, with chunks and bodies in vLLM's shape ------------------------------------------------

def _text_completion(url: str, body: bytes) -> MockReply:
    """vLLM's /v1/completions: ``text`` choices, chunks of object ``text_completion``, no role chunk."""
    request = orjson.loads(body)
    head = {"id": "cmpl-7", "object": "text_completion", "created": 1764000000, "model": "m"}
    usage = {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    if not request.get("stream"):
        return MockReply.json({**head, "choices": [{"index": 0, "text": " red green blue", "logprobs": None,
                                                    "finish_reason": "length", "stop_reason": None}],
                               "usage": usage})
    chunks = [b"data: " + orjson.dumps({**head, "choices": [{"index": 0, "text": text, "logprobs": None,
                                                              "finish_reason": finish, "stop_reason": None}]})
              + b"\n\n" for text, finish in ((" red", None), (" green", None), (" blue", "length"))]
    if (request.get("stream_options") or {}).get("include_usage"):
        chunks.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
    return MockReply(200, [*chunks, b"data: [DONE]\n\n"], content_type="text/event-stream")


@pytest.mark.parametrize("first_streamed", [True, False])
def test_a_completion_is_replayed_as_a_completion_whichever_form_came_first(
        first_streamed: bool, tmp_path: Path) -> None:
    upstreams = MockUpstreams(_text_completion)
    config = {"pools": [pool("p", "http://a:8000/v1", models=["m"], health={"interval": 0},
                             engine_metrics={"interval": 0})],
              "auth": {"keys": [{"tenant": "acme", "key": KEYS["acme"]}]},
              "tenants": {"acme": {"answer_cache": {"ttl_s": 60}}}}
    body = {"model": "m", "prompt": "Name three colours:", "max_tokens": 3, "temperature": 0}
    auth = {"Authorization": f"Bearer {KEYS['acme']}"}
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        def ask(stream: bool) -> httpx.Response:
            extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
            return client.post("/v1/completions", json={**body, **extra}, headers=auth)

        assert ask(first_streamed).headers["x-prefixgate-answer-cache"] == "miss"
        replayed = {stream: ask(stream) for stream in (True, False)}
        assert len(upstreams.posts()) == 1  # both repeats were replayed
        for answer in replayed.values():
            assert answer.headers["x-prefixgate-answer-cache"] == "hit"
        whole = replayed[False].json()
        assert whole["object"] == "text_completion" and whole["choices"][0]["text"] == " red green blue"
        assert whole["choices"][0]["finish_reason"] == "length" and whole["usage"]["completion_tokens"] == 3
        events = [orjson.loads(line[6:]) for line in replayed[True].content.split(b"\n")
                  if line.startswith(b"data: {")]
        assert {event["object"] for event in events} == {"text_completion"}
        assert "".join(c["text"] for e in events for c in e["choices"]) == " red green blue"
        assert [c["finish_reason"] for e in events for c in e["choices"]][-1] == "length"
        assert events[-1]["usage"]["completion_tokens"] == 3
