"""What a route reads of its answer as the ``Exchange`` relays it, where chat's framing does not apply."""

from __future__ import annotations

from typing import Protocol


class AnswerTap(Protocol):
    """What a route reads of its answer as it is relayed, where chat's framing does not apply (the
    Responses API: its stream's last event, its usage's names, the response it keeps)."""

    @property
    def ended(self) -> bool: ...  # the stream's last event came

    def relay(self, chunk: bytes) -> bytes: ...  # a streamed chunk, watched (and what goes out instead)

    def stream_usage(self, events: int) -> tuple[int | None, int | None]: ...

    async def stream_done(self) -> None: ...  # the stream ended whole, before the client's answer ends

    async def whole(self, body: bytes) -> tuple[bytes, tuple[int | None, int | None]]: ...  # a 200 answer
