"""Start short, continue long, through the gateway to two fake engines (a short pool and a long one) that
answer as engines do: ``fake_tokens`` is an answer's natural length, cut at the request's max_tokens with
``finish_reason: "length"``. The real engine's side (byte-for-byte equality with a direct answer, stop
strings across the seam, aborts) is in tests/integration/test_continuation.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import partial

import httpx
import orjson
import pytest

from tests.support.chat_body import chat_body
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.fake_upstream import FakeUpstream
from tests.support.metrics_text import sample_sum
from tests.support.servers import serve_in_thread

T = 8  # the short pool's threshold in these tests
chat = partial(chat_body, system="You are a chat app.", user_text="Hello there", model="fake-model")


@pytest.fixture
def pools() -> Iterator[tuple[FakeServer, FakeServer]]:
    with ExitStack() as stack:
        short, long = FakeUpstream(), FakeUpstream()
        yield (FakeServer(stack.enter_context(serve_in_thread(short)), short),
               FakeServer(stack.enter_context(serve_in_thread(long)), long))


@pytest.fixture
def gateway(pools: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]) -> str:
    short, long = pools
    return start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                       short_threshold=T, continue_long=True),
                                  pool("long", long.base_url, models=["fake-model"], output="long")]})


def stream_events(gateway: str, body: dict) -> tuple[httpx.Headers, list[dict]]:
    with httpx.stream("POST", gateway + "/v1/chat/completions", json={**body, "stream": True}) as answer:
        assert answer.status_code == 200, answer.read()
        lines = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]" and lines.count("[DONE]") == 1
    return answer.headers, [orjson.loads(line) for line in lines[:-1]]


def test_a_cut_stream_is_continued_in_the_long_pool_as_one_answer(
        pools: tuple[FakeServer, FakeServer], gateway: str) -> None:
    short, long = pools
    headers, events = stream_events(gateway, chat(fake_tokens=20, stream_options={"include_usage": True}))
    assert headers["x-prefixgate-pool"] == "short"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == " tok" * 20  # nothing lost, nothing repeated
    finishes = [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert finishes == ["stop"]  # the long leg's, once
    assert {e["id"] for e in events} == {events[0]["id"]} and {e["created"] for e in events} == {events[0]["created"]}
    assert [e for e in events if e["choices"] and "role" in e["choices"][0]["delta"]] == events[:1]
    assert events[-1]["usage"] == {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32}
    first, second = short.app.stats.last_body, long.app.stats.last_body
    assert first is not None and second is not None
    assert first["max_tokens"] == T and "continue_final_message" not in first
    assert second["continue_final_message"] is True and second["add_generation_prompt"] is False
    assert second["messages"][-1] == {"role": "assistant", "content": " tok" * T}
    assert "max_tokens" not in second  # the client set none: the long leg writes the rest
    assert first["cache_salt"] and second["cache_salt"] == first["cache_salt"]  # one tenant's cache, both legs
    metrics = httpx.get(gateway + "/metrics").text
    assert sample_sum(metrics, "prefixgate_continued_total", pool="long") == 1
    assert sample_sum(metrics, "prefixgate_continuation_prefill_tokens_total", pool="long") == 12
    assert sample_sum(metrics, "prefixgate_continuation_seam_seconds_count", pool="long") == 1
    assert sample_sum(metrics, "prefixgate_pool_choices_total", pool="short", reason="start_short") == 1


def test_a_cut_json_answer_is_joined_and_the_clients_cap_holds(
        pools: tuple[FakeServer, FakeServer], gateway: str) -> None:
    _, long = pools
    answer = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=20)).json()
    assert answer["choices"][0]["message"]["content"] == " tok" * 20
    assert answer["choices"][0]["finish_reason"] == "length"  # the client's own cap, reached in the long leg
    assert answer["usage"]["completion_tokens"] == 20 and answer["usage"]["prompt_tokens"] == 12
    assert long.app.stats.last_body is not None and long.app.stats.last_body["max_tokens"] == 20 - T
    fits = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=T)).json()
    assert fits["choices"][0]["message"]["content"] == " tok" * T  # within the cut: one leg, as asked
    assert long.app.stats.requests == 1


def test_answers_that_may_not_be_cut_are_never_cut(pools: tuple[FakeServer, FakeServer], gateway: str) -> None:
    short, long = pools
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    for fields in ({"tools": [tool]}, {"response_format": {"type": "json_object"}}, {"n": 2}, {"logprobs": True}):
        answer = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=100, **fields))
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 30, fields
    sent = [*short.app.stats.recent_bodies, *long.app.stats.recent_bodies]
    assert len(sent) == 4 and all(body["max_tokens"] == 100 for body in sent)
    assert not any(body.get("continue_final_message") for body in sent)


def test_the_split_opens_within_each_apps_first_requests_and_follows_a_drift(
        pools: tuple[FakeServer, FakeServer], gateway: str) -> None:
    """Two apps, no max_tokens: one always answers in 3 tokens, one always in 600. Within 16 requests each
    the short app is short, the long app long; then the short app turns long and is followed. Once its own
    history decides it short (8 answers, all well within the cut), the short app is sent as asked, not cut."""
    short, _ = pools

    def where(app: str, tokens: int) -> str:
        answer = httpx.post(gateway + "/v1/chat/completions", json=chat(system=app, fake_tokens=tokens))
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == tokens
        return answer.headers["x-prefixgate-pool"]

    shorts = [where("You classify.", 3) for _ in range(16)]
    assert "max_tokens" not in (short.app.stats.last_body or {"max_tokens": "none sent"})  # decided: not cut
    longs = [where("You write essays.", 600) for _ in range(16)]
    assert shorts == ["short"] * 16
    assert longs[-8:] == ["long"] * 8  # long from the first answers learned on
    drifted = [where("You classify.", 600) for _ in range(16)]
    assert drifted[-4:] == ["long"] * 4
    metrics = httpx.get(gateway + "/metrics").text
    # the first essay was sent whole: the app's history had decided it short; from the next, it may be cut again
    assert sample_sum(metrics, "prefixgate_continued_total") == longs.count("short") + drifted.count("short") - 1
    assert sample_sum(metrics, "prefixgate_pool_choices_total", pool="short", reason="history") >= 9


def test_a_long_pool_that_fails_before_its_first_token_ends_the_stream_with_an_error_event(
        pools: tuple[FakeServer, FakeServer], gateway: str) -> None:
    _, long = pools
    long.app.fail_status = 503
    with httpx.stream("POST", gateway + "/v1/chat/completions", json=chat(fake_tokens=20, stream=True)) as answer:
        assert answer.status_code == 200
        lines = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
    text = "".join((orjson.loads(line)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
                   for line in lines[:-1])
    assert text == " tok" * T  # the short leg's text went out once
    assert "error" in orjson.loads(lines[-1])
    whole = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=20))
    assert whole.status_code == 503 and "error" in whole.json()  # nothing went out yet: the engine's status


def test_the_route_explanation_says_whether_a_request_starts_short_and_why(
        pools: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]) -> None:
    short, long = pools
    gateway = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                          short_threshold=T, continue_long=True),
                                     pool("long", long.base_url, models=["fake-model"], output="long")],
                           "auth": {"admin_key": "admin-key-123"}})

    def explain(body: dict) -> dict:
        answer = httpx.post(gateway + "/admin/route/v1/chat/completions", json=body,
                            headers={"Authorization": "Bearer admin-key-123"})
        assert answer.status_code == 200, answer.text
        return answer.json()

    essay = chat(system="You write essays.", fake_tokens=600)
    first = explain(essay)
    assert (first["pool"], first["starts_short"], first["cut_at"], first["continues_in"]) == ("short", True, T, "long")
    assert "no history yet" in first["why"]
    for _ in range(8):
        httpx.post(gateway + "/v1/chat/completions", json=essay)
    learned = explain(essay)
    assert (learned["pool"], learned["starts_short"], learned["short_share"]) == ("long", False, 0.0)
    assert "ended well past 8: placed by its own history, starts long" in learned["why"]
    mixed = [chat(system="You answer.", fake_tokens=3 if n % 6 else 600) for n in range(8)]
    for body in mixed:
        httpx.post(gateway + "/v1/chat/completions", json=body)
    by_share = explain(mixed[0])  # one answer in six is long: no history decides it, the share does
    assert (by_share["pool_reason"], by_share["starts_short"]) == ("start_short", True)
    assert "75% of its template's answers fit 8 (long below 20%)" in by_share["why"]
    label = chat(system="You label tickets.", fake_tokens=3)
    for _ in range(8):
        httpx.post(gateway + "/v1/chat/completions", json=label)
    decided = explain(label)
    assert (decided["pool"], decided["pool_reason"], decided["starts_short"]) == ("short", "history", False)
    assert "ended well within 8: placed by its own history, not cut" in decided["why"]
    tools = explain(chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]))
    assert tools["starts_short"] is False and "may not be cut" in tools["why"]


def test_priority_hints_send_the_predicted_length_and_put_a_continuation_first(
        pools: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]) -> None:
    short, long = pools
    gateway = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                          short_threshold=T, continue_long=True, priority_hints=True),
                                     pool("long", long.base_url, models=["fake-model"], output="long",
                                          priority_hints=True)]})
    for _ in range(8):  # this app's answers are 3 tokens: predicted p50 3
        httpx.post(gateway + "/v1/chat/completions", json=chat(system="You classify.", fake_tokens=3))
    httpx.post(gateway + "/v1/chat/completions", json=chat(system="You classify.", fake_tokens=3))
    assert short.app.stats.last_body is not None and short.app.stats.last_body["priority"] == 3
    httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=20))  # unknown: the prior's p50
    assert short.app.stats.last_body["priority"] == 512
    assert long.app.stats.last_body is not None and long.app.stats.last_body["priority"] == 0  # mid-answer
    httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=3, priority=-5))
    assert short.app.stats.last_body["priority"] == -5  # the client's own is kept


def test_the_splits_recall_counts_only_the_answers_that_go_by_the_split(
        pools: tuple[FakeServer, FakeServer], gateway: str) -> None:
    """Answers that may be cut start short whatever their prediction said, so they do not count in the
    short pool's recall; the answers that go by prediction (JSON here) do."""
    for _ in range(70):  # a chat app's short answers, predicted long until its history knew them
        httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=3))
    assert "prefixgate_length_short_recall{" not in httpx.get(gateway + "/metrics").text  # none measured
    for _ in range(70):
        httpx.post(gateway + "/v1/chat/completions",
                   json=chat(fake_tokens=3, response_format={"type": "json_object"}))
    assert 0 < sample_sum(httpx.get(gateway + "/metrics").text, "prefixgate_length_short_recall", pool="short") < 1


def test_a_continuation_the_long_pool_sheds_does_not_overflow_to_a_pool_that_cannot_continue_it(
        pools: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]) -> None:
    """The long pool overflows to a litellm pool, which cannot write on from a partial answer: a continuation
    the long pool sheds ends with the shed's error event (the short leg's text already out), not a 500."""
    short, long = pools
    hosted = {"name": "hosted", "kind": "litellm", "models": ["fake-model"], "litellm_model": "openai/fake-model",
              "api_base": "http://127.0.0.1:9/v1", "api_key": "unused"}
    gateway = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                          short_threshold=T, continue_long=True),
                                     pool("long", long.base_url, models=["fake-model"], output="long",
                                          max_in_flight=1, queue_size=0, overflow_to="hosted"), hosted]})
    holding = chat(fake_tokens=1000, fake_delay_ms=20, stream=True)
    with httpx.stream("POST", gateway + "/v1/chat/completions", json=holding,
                      headers={"x-prefixgate-pool": "long"}) as held:
        reading = held.iter_lines()  # kept: a generator dropped closes the stream
        next(reading)  # the long pool's one slot is taken
        with httpx.stream("POST", gateway + "/v1/chat/completions",
                          json=chat(fake_tokens=20, stream=True)) as answer:
            assert answer.status_code == 200
            lines = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
    text = "".join((orjson.loads(line)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
                   for line in lines[:-1])
    assert text == " tok" * T
    assert orjson.loads(lines[-1])["error"]["code"] == "queue_full"
    metrics = httpx.get(gateway + "/metrics").text
    assert sample_sum(metrics, "prefixgate_pool_choices_total", pool="hosted") == 0


def _capped_long(pools: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str], limit: int,
                 action: str) -> str:
    short, long = pools
    return start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                       short_threshold=T, continue_long=True),
                                  pool("long", long.base_url, models=["fake-model"], output="long",
                                       max_tokens_limit=limit)],
                        "limits": {"max_tokens_action": action}})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_request_the_long_pools_caps_refuse_is_refused_before_the_short_engine_works(
        pools: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str], stream: bool) -> None:
    """As when it is named to the long pool: a 400 naming the pool's limit, no short leg run first."""
    short, long = pools
    gateway = _capped_long(pools, start_proxy, 6, "reject")
    answer = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=10, stream=stream))
    assert answer.status_code == 400, answer.text
    assert "pool 'long'.max_tokens" in answer.json()["error"]["message"]
    named = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=10),
                       headers={"x-prefixgate-pool": "long"})
    assert named.status_code == 400 and named.json()["error"]["code"] == answer.json()["error"]["code"]
    assert short.app.stats.requests == 0 and long.app.stats.requests == 0


def test_the_long_pools_clamp_bounds_the_whole_answer(pools: tuple[FakeServer, FakeServer],
                                                      start_proxy: Callable[..., str]) -> None:
    short, long = pools
    gateway = _capped_long(pools, start_proxy, 12, "clamp")
    answer = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=20)).json()
    assert answer["usage"]["completion_tokens"] == 12 and answer["choices"][0]["finish_reason"] == "length"
    assert long.app.stats.last_body is not None and long.app.stats.last_body["max_tokens"] == 12 - T
    gateway = _capped_long(pools, start_proxy, 6, "clamp")  # below the cut: the short leg ends it
    before = long.app.stats.requests
    answer = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=10)).json()
    assert answer["usage"]["completion_tokens"] == 6 and long.app.stats.requests == before
    assert short.app.stats.last_body is not None and short.app.stats.last_body["max_tokens"] == 6


def test_a_min_tokens_above_the_cut_is_split_across_the_legs(pools: tuple[FakeServer, FakeServer],
                                                              gateway: str) -> None:
    short, long = pools
    answer = httpx.post(gateway + "/v1/chat/completions", json=chat(fake_tokens=30, max_tokens=20, min_tokens=12))
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 20
    assert short.app.stats.last_body is not None and long.app.stats.last_body is not None
    assert (short.app.stats.last_body["max_tokens"], short.app.stats.last_body["min_tokens"]) == (T, T)
    assert (long.app.stats.last_body["max_tokens"], long.app.stats.last_body["min_tokens"]) == (20 - T, 12 - T)
