"""Token usage read from an answer's bytes, without parsing the answer.

The relay passes answers through untouched; settling a tenant's token reservation and learning
output lengths need only two numbers, found by searching the bytes for OpenAI's usage fields. A
stream carries usage only when the client asked for it (stream_options.include_usage); otherwise
each content event counts as one token, which is how vLLM streams (one event per decode step), save
that a step whose token adds no text yet (part of a multi-byte character) sends none, so the count
can fall a few tokens short (sampled, up to 7 of 24 on the tiny model; tests/integration/test_usage_engine.py).
"""

from __future__ import annotations

_PROMPT = b'"prompt_tokens":'
_COMPLETION = b'"completion_tokens":'
_EVENT = b"data: {"


def _int_after(data: bytes, field: bytes) -> int | None:
    at = data.rfind(field)
    if at < 0:
        return None
    start = at + len(field)
    while start < len(data) and data[start] in b" \t":
        start += 1
    end = start
    while end < len(data) and 48 <= data[end] <= 57:
        end += 1
    return int(data[start:end]) if end > start else None


def usage_in(data: bytes) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) of the last usage object in ``data``, where present."""
    return _int_after(data, _PROMPT), _int_after(data, _COMPLETION)


def stream_events(chunk: bytes) -> int:
    """Data events (JSON objects) in a piece of an SSE stream."""
    return chunk.count(_EVENT)


def streamed_completion_tokens(events: int) -> int:
    """Completion tokens of a stream without usage: its events less the first (the role alone), at
    one token per event."""
    return max(0, events - 1)
