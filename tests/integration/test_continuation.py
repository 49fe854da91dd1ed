"""Start short, continue long on the real engine (vLLM CPU, the tiny model, greedy): a gateway whose short
pool (threshold 16) and long pool are the embedded engine, each leg compared with the engine's own answer to
what that leg asks, sent direct."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import orjson
import pytest

from tests.support.configs import pool
from tests.support.embedded import Embedded
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until

pytestmark = pytest.mark.engine

T = 16
MESSAGES = [{"role": "system", "content": "You answer questions about caches."},
            {"role": "user", "content": "Say something about prefix caching."}]


@pytest.fixture
def gateway(embedded: Embedded, start_proxy: Callable[..., str]) -> str:
    engine = embedded.engine + "/v1"
    # No cache salt: the engine's answers asked direct share the gateway's cached blocks, so a leg and the same
    # request sent direct start from the same cached prefix.
    return start_proxy({"pools": [pool("short", engine, models=[embedded.model], output="short", short_threshold=T,
                                       continue_long=True),
                                  pool("long", engine, models=[embedded.model], output="long")],
                        "prompt": {"cache_salt": "off"}})


def body(embedded: Embedded, **fields: object) -> dict:
    return {"model": embedded.model, "messages": MESSAGES, "ignore_eos": True, "temperature": 0, **fields}


def direct(embedded: Embedded, request: dict) -> dict:
    answer = httpx.post(embedded.engine + "/v1/chat/completions", json=request, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def streamed(origin: str, request: dict) -> list[dict]:
    with httpx.stream("POST", origin + "/v1/chat/completions", json={**request, "stream": True}, timeout=120) as answer:
        assert answer.status_code == 200, answer.read()
        lines = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [orjson.loads(line) for line in lines[:-1]]


def text_of(events: list[dict]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])


def continued(gateway: str) -> float:
    return sample_sum(httpx.get(gateway + "/metrics").text, "prefixgate_continued_total")


def continuation_of(embedded: Embedded, head: str, max_tokens: int, **fields: object) -> dict:
    """The engine's own answer, asked direct, when told to write on from ``head`` as the long leg is."""
    request = body(embedded, max_tokens=max_tokens, **fields)
    request["messages"] = [*MESSAGES, {"role": "assistant", "content": head}]
    return direct(embedded, {**request, "continue_final_message": True, "add_generation_prompt": False})


def test_a_continued_answer_is_the_short_legs_text_then_the_engines_continuation_of_it(
        embedded: Embedded, gateway: str) -> None:
    """At temperature 0 a 40-token answer cut at 16: its first 16 tokens are the engine's own 16-token answer,
    and the rest is exactly what the engine writes when asked direct to continue that text; one id, one
    finish_reason, usage summed, streamed and as JSON.

    What is guaranteed, on any CPU: each leg is the engine's own answer to what that leg asks. Equality with
    the engine's one-shot 40-token answer is not: the long leg's engine computes the cut text's keys and values
    by prefill where the one-shot answer computed them token by token, and at a near-tie (random weights have
    many) the two kernels may pick different tokens; on some Intel CPUs they do, right at the seam."""
    request = body(embedded, max_tokens=40)
    engine = direct(embedded, request)  # caches the prompt's blocks: every request below starts from them
    head = direct(embedded, body(embedded, max_tokens=T))["choices"][0]["message"]["content"]
    before = continued(gateway)
    events = streamed(gateway, {**request, "stream_options": {"include_usage": True}})
    rest = continuation_of(embedded, head, 40 - T)
    assert text_of(events) == head + rest["choices"][0]["message"]["content"]
    assert len({e["id"] for e in events}) == 1
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]] \
        == ["length"]
    assert events[-1]["usage"]["completion_tokens"] == 40
    assert events[-1]["usage"]["prompt_tokens"] == engine["usage"]["prompt_tokens"]
    joined = httpx.post(gateway + "/v1/chat/completions", json=request, timeout=120).json()
    rest = continuation_of(embedded, head, 40 - T)
    assert joined["choices"][0]["message"]["content"] == head + rest["choices"][0]["message"]["content"]
    assert joined["usage"] == engine["usage"] | {"prompt_tokens_details": joined["usage"].get("prompt_tokens_details")}
    assert continued(gateway) == before + 2


def test_a_stop_string_across_the_seam_ends_the_answer_where_it_begins(embedded: Embedded, gateway: str) -> None:
    """A stop string that begins in the short leg's text and ends in what the long leg writes ends the answer
    where it begins, with ``finish_reason: "stop"``, though neither engine saw it whole."""
    direct(embedded, body(embedded, max_tokens=40))  # the prompt's blocks cached, as for the gateway's legs
    head = direct(embedded, body(embedded, max_tokens=T))["choices"][0]["message"]["content"]
    whole = head + continuation_of(embedded, head, 40 - T)["choices"][0]["message"]["content"]
    # the shortest string across the seam that is not found earlier (the tiny model's text repeats itself)
    stop = next(whole[len(head) - back:len(head) + ahead] for size in range(2, 24) for back in range(1, size)
                if whole.find(whole[len(head) - back:len(head) + (ahead := size - back)]) == len(head) - back)
    request = body(embedded, max_tokens=40, stop=[stop])
    events = streamed(gateway, request)
    assert text_of(events) == whole[:whole.find(stop)]
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"][0]["finish_reason"]] == ["stop"]
    joined = httpx.post(gateway + "/v1/chat/completions", json=request, timeout=120).json()["choices"][0]
    assert (joined["message"]["content"], joined["finish_reason"]) == (whole[:whole.find(stop)], "stop")


def test_more_than_one_choice_is_never_cut(embedded: Embedded, gateway: str) -> None:
    before = continued(gateway)
    request = body(embedded, max_tokens=40, n=2, temperature=0.8, seed=7)  # the engine samples n > 1
    answer = httpx.post(gateway + "/v1/chat/completions", json=request, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 80  # two whole answers of 40, none cut at 16
    assert continued(gateway) == before


def _finished(embedded: Embedded, reason: str) -> float:
    return sample_sum(httpx.get(embedded.engine + "/metrics").text, "vllm:request_success_total",
                      finished_reason=reason)


def test_a_client_that_leaves_during_the_seam_leaves_nothing_running(embedded: Embedded, gateway: str) -> None:
    """The client reads past the seam, then closes: the long leg is aborted (it never finishes at its
    length, as it would if it ran on) and no request keeps running."""
    by_length = _finished(embedded, "length")
    payload = orjson.dumps(body(embedded, max_tokens=3000, stream=True))
    port = int(gateway.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        received = b""
        while received.count(b"data: ") < T + 4:  # the role event, T tokens, then the long leg's first
            received += sock.recv(65536)

    def running() -> float:
        return sample_sum(httpx.get(embedded.engine + "/metrics").text, "vllm:num_requests_running")

    wait_until(lambda: running() == 0, timeout=60, interval=0.05, what="the engine to run nothing")
    assert _finished(embedded, "length") == by_length + 1  # the short leg, cut at T; the long leg never ended
