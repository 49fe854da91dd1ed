"""The usage prefixgate reads from a real vLLM engine's answers: what tenant token limits settle with
and what output-length prediction learns from."""

from __future__ import annotations

import time

import httpx
import pytest

from policies.answers.usage import stream_events, streamed_completion_tokens, usage_in
from tests.support.embedded import Embedded
from tests.support.metrics_text import sample_sum

pytestmark = pytest.mark.engine


def stream_from_engine(embedded: Embedded, max_tokens: int, seed: int) -> tuple[int, int]:
    """(completion tokens the engine reports, completion tokens counted from the stream's events alone)."""
    body = {"model": embedded.model, "messages": [{"role": "user", "content": "Count to ten."}],
            "max_tokens": max_tokens, "stream": True, "ignore_eos": True, "seed": seed,
            "stream_options": {"include_usage": True}}
    raw = httpx.post(embedded.engine + "/v1/chat/completions", json=body, timeout=120).content
    prompt, completion = usage_in(raw)
    assert completion == max_tokens and prompt is not None and prompt > 0
    events_without_usage = stream_events(raw) - 1  # the usage event, present here to check against
    return completion, streamed_completion_tokens(events_without_usage)


@pytest.mark.parametrize("seed", range(4))
def test_counting_a_streams_events_never_counts_above_the_engines_usage(embedded: Embedded, seed: int) -> None:
    """The fallback for an upstream that sends no usage. A step whose token adds no text yet (part of a
    multi-byte character) sends no event, and vLLM merges steps a slow reader has not taken yet into one
    event, so counting can only fall short: never charge a tenant for tokens it did not get. By how much
    depends on the CPU's arithmetic and the engine's load, so only this side is fixed."""
    completion, counted = stream_from_engine(embedded, 48, seed)
    assert 0 < counted <= completion


def test_a_slow_reader_is_charged_the_tokens_the_engine_reports(embedded: Embedded) -> None:
    """A stream without include_usage, read slowly through prefixgate: the gateway's token count is the
    engine's usage (which it asked for), whatever the events were merged into, and the client still
    gets no usage event it did not ask for."""
    def completion_tokens() -> float:
        return sample_sum(httpx.get(embedded.proxy + "/metrics").text, "prefixgate_tokens_total", kind="completion")

    before = completion_tokens()
    body = {"model": embedded.model, "messages": [{"role": "user", "content": "Count slowly."}],
            "max_tokens": 64, "stream": True, "ignore_eos": True}
    received = b""
    with httpx.stream("POST", embedded.proxy + "/v1/chat/completions", json=body, timeout=120) as answer:
        for piece in answer.iter_raw():
            received += piece
            time.sleep(0.05)
    assert received.endswith(b"data: [DONE]\n\n") and b'"usage"' not in received
    assert streamed_completion_tokens(stream_events(received)) <= 64
    assert completion_tokens() - before == 64


def test_a_json_answers_usage_is_read_from_its_bytes(embedded: Embedded) -> None:
    body = {"model": embedded.model, "messages": [{"role": "user", "content": "Count to ten."}],
            "max_tokens": 9, "ignore_eos": True}
    raw = httpx.post(embedded.engine + "/v1/chat/completions", json=body, timeout=120).content
    assert usage_in(raw)[1] == 9 == httpx.Response(200, content=raw).json()["usage"]["completion_tokens"]
