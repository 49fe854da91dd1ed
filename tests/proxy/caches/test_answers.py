"""Whole-answer reuse for tenants that opt in: exact deterministic repeats never reach a replica."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import orjson
from hypothesis import given
from hypothesis import strategies as st

from policies.answers.answer_cache import answer_key, cacheable, completion_from_stream, stream_from_completion
from tests.support.configs import pool
from tests.support.fake_server import FakeServer

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


_completions = st.builds(
    lambda text, finish, usage: {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                     "finish_reason": finish}],
        "usage": {"prompt_tokens": usage, "completion_tokens": 2, "total_tokens": usage + 2},
    },
    st.text(max_size=200), st.sampled_from(["stop", "length"]), st.integers(0, 1000),
)


@given(_completions)
def test_a_replayed_stream_adds_up_to_the_stored_answer(completion: dict) -> None:
    stream = stream_from_completion(completion, include_usage=True)
    assert all(orjson.loads(line[6:]) for line in stream.split(b"\n") if line.startswith(b"data: {"))
    assert completion_from_stream(stream) == completion
