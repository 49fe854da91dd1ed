"""The usage prefixgate reads from a real vLLM engine's answers: what tenant token limits settle with
and what output-length prediction learns from."""

from __future__ import annotations

import httpx
import pytest

from policies.usage import stream_events, streamed_completion_tokens, usage_in
from tests.conftest import Embedded

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("max_tokens", [1, 7, 24, 64])
def test_a_stream_without_usage_is_counted_from_its_events(embedded: Embedded, max_tokens: int) -> None:
    """vLLM streams one event per decode step after a role-only first event, except that a step whose
    token adds no text yet (part of a multi-byte character) sends none: the count of content events
    is the engine's completion tokens or a few fewer, never more. Greedy decoding keeps the count
    the same on every run: sampled, this random-weight model drew up to 7 such byte tokens in 24."""
    body = {"model": embedded.model, "messages": [{"role": "user", "content": "Count to ten."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    raw = httpx.post(embedded.engine + "/v1/chat/completions", json=body, timeout=120).content
    prompt, completion = usage_in(raw)
    assert completion == max_tokens and prompt is not None and prompt > 0
    events_without_usage = stream_events(raw) - 1  # the usage event, present here to check against
    counted = streamed_completion_tokens(events_without_usage)
    assert completion - max(2, completion // 4) <= counted <= completion


def test_a_json_answers_usage_is_read_from_its_bytes(embedded: Embedded) -> None:
    body = {"model": embedded.model, "messages": [{"role": "user", "content": "Count to ten."}],
            "max_tokens": 9, "ignore_eos": True}
    raw = httpx.post(embedded.engine + "/v1/chat/completions", json=body, timeout=120).content
    assert usage_in(raw)[1] == 9 == httpx.Response(200, content=raw).json()["usage"]["completion_tokens"]
