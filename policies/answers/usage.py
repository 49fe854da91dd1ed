"""Token usage read from an answer's bytes, without parsing the answer.

The relay passes answers through untouched; settling a tenant's token reservation and learning
output lengths need only two numbers, found by searching the bytes for OpenAI's usage fields.

A stream carries usage only when stream_options.include_usage asks for it, so the gateway always
asks and, for a client that did not, drops that one event on the way out (``hide_usage_events``).
Counting events instead undercounts: a decode step whose token adds no text yet (part of a
multi-byte character) sends no event, and vLLM merges the steps a slow reader has not taken yet into
one event, so a client could read slowly and be charged for a fraction of its tokens. The event count
remains only for an upstream that ignores include_usage.
"""

from __future__ import annotations

CHAT_USAGE = (b'"prompt_tokens":', b'"completion_tokens":')
RESPONSES_USAGE = (b'"input_tokens":', b'"output_tokens":')  # the Responses API's names for them
# The Messages API counts a prompt's cached tokens apart from its input tokens: the prompt is their sum.
_CACHE_READ, _CACHE_CREATED = b'"cache_read_input_tokens":', b'"cache_creation_input_tokens":'
_EVENT = b"data: {"
_NO_CHOICES = b'"choices":[]'
_USAGE = b'"usage":'
HELD_EVENT_LIMIT = 65536  # bytes without an event boundary passed on as they are, so nothing piles up


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


def usage_in(data: bytes, fields: tuple[bytes, bytes] = CHAT_USAGE) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens of the last usage object in ``data``, where present; ``fields``:
    their names (chat's and completions', or ``RESPONSES_USAGE``)."""
    return _int_after(data, fields[0]), _int_after(data, fields[1])


def messages_usage(data: bytes) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens of the last usage object of a Messages answer in ``data``: the prompt is
    ``input_tokens`` plus the cached ones Anthropic's usage counts apart (``cache_read_input_tokens``,
    ``cache_creation_input_tokens``)."""
    prompt, completion = usage_in(data, RESPONSES_USAGE)
    if prompt is not None:
        prompt += (_int_after(data, _CACHE_READ) or 0) + (_int_after(data, _CACHE_CREATED) or 0)
    return prompt, completion


def stream_events(chunk: bytes) -> int:
    """Data events (JSON objects) in a piece of an SSE stream."""
    return chunk.count(_EVENT)


def streamed_completion_tokens(events: int) -> int:
    """Completion tokens of a stream without usage: its events less the first (the role alone), at
    one token per event."""
    return max(0, events - 1)


def _event_end(data: bytes) -> int:
    """Where the last complete SSE event in ``data`` ends (0 when none does)."""
    lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


def hide_usage_events(data: bytes) -> tuple[bytes, bytes]:
    """(what to send, what to hold for the next piece) of a stream whose usage event the client did
    not ask for: whole events only, less any usage-only one (empty choices and a usage object)."""
    if data.endswith(b"\n\n") and _NO_CHOICES not in data:  # the usual piece: whole content events
        return data, b""
    end = _event_end(data)
    if end == 0:
        return (data, b"") if len(data) > HELD_EVENT_LIMIT else (b"", data)
    ready, held = data[:end], data[end:]
    if _NO_CHOICES not in ready:
        return ready, held
    separator = b"\r\n\r\n" if ready.endswith(b"\r\n\r\n") else b"\n\n"
    events = ready.split(separator)[:-1]
    kept = [event for event in events if not (_NO_CHOICES in event and _USAGE in event)]
    return b"".join(event + separator for event in kept), held
