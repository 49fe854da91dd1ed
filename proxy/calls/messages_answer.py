"""What the gateway reads of an Anthropic Messages answer as it relays it: its usage and whether its stream
ended.

A Messages stream ends with ``event: message_stop`` (or an ``event: error``), never with chat's ``[DONE]``.
Its usage is in ``message_start`` (the prompt's tokens) and in the last ``message_delta`` (the output's,
and vLLM's prompt counts again), so the relay keeps the stream's first and last few kilobytes and reads them
once, at its end; the prompt counts its cached tokens too (``messages_usage``).
"""

from __future__ import annotations

from collections import deque

from policies.answers.usage import messages_usage

# An event's name starts its line; in an event's JSON data a newline is always escaped, so text that quotes a
# marker never has one right before it.
_LAST_EVENTS = (b"\nevent: message_stop", b"\nevent: error")
_KEPT = 4096  # bytes kept of the stream's head and of its tail: message_start, and message_delta with the end
_EVENT_END = b"\n\n"


class MessagesAnswer:
    """One Messages request's answer, as the relay sees it (the ``AnswerTap`` an ``Outgoing`` carries)."""

    __slots__ = ("_head", "_last_seen", "_recent", "_tail", "_tail_size")
    cut_off = False  # a Messages answer is read to the engine's end

    def __init__(self) -> None:
        self._head = b""  # the stream's first bytes: message_start, with the prompt's usage
        self._tail: deque[bytes] = deque()  # its last chunks, at least ``_KEPT`` bytes where it has them
        self._tail_size = 0
        self._last_seen = False  # the last event's name came
        self._recent = b"\n"  # the stream's last bytes, for a marker cut across chunks (a line starts it)

    @property
    def ended(self) -> bool:
        """The last event came whole: its name at a line's start, and its blank line."""
        return self._last_seen and bool(self._tail) and self._tail[-1].endswith(_EVENT_END)

    def relay(self, chunk: bytes) -> bytes:
        if len(self._head) < _KEPT:
            self._head += chunk[:_KEPT - len(self._head)]
        if not self._last_seen:
            window = self._recent + chunk
            self._last_seen = any(marker in window for marker in _LAST_EVENTS)
            self._recent = window[-32:]
        if chunk:
            tail = self._tail
            tail.append(chunk)
            self._tail_size += len(chunk)
            while self._tail_size - len(tail[0]) >= _KEPT:
                self._tail_size -= len(tail.popleft())
        return chunk

    def stream_usage(self, events: int) -> tuple[int | None, int | None]:
        prompt, completion = messages_usage(b"".join(self._tail))
        if prompt is None:
            prompt = messages_usage(self._head)[0]
        return prompt, completion

    async def stream_done(self) -> tuple[bytes, bool]:
        return b"", True

    async def whole(self, body: bytes) -> tuple[bytes, tuple[int | None, int | None]]:
        return body, messages_usage(body)
