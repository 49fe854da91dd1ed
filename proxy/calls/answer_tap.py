"""What a route reads of its answer as the ``Exchange`` relays it, where chat's framing does not apply."""

from __future__ import annotations

from typing import Protocol


class AnswerTap(Protocol):
    """What a route reads of its answer as it is relayed, where chat's framing does not apply (the
    Responses API: its stream's last event, its usage's names, the response it keeps; an answer continued
    in another pool: ``ContinuedAnswer``)."""

    @property
    def ended(self) -> bool: ...  # the stream's last event came

    @property
    def cut_off(self) -> bool: ...  # the answer ended before the engine's stream did: stop reading it

    def relay(self, chunk: bytes) -> bytes: ...  # a streamed chunk, watched (and what goes out instead)

    def stream_usage(self, events: int) -> tuple[int | None, int | None]: ...

    async def stream_done(self) -> tuple[bytes, bool]: ...  # the stream ended whole: its last bytes, whether
    # the client's answer ends with them (False: another leg follows)

    async def whole(self, body: bytes) -> tuple[bytes | None, tuple[int | None, int | None]]: ...  # a 200
    # answer: what goes out (None: nothing yet, another leg follows) and its usage
