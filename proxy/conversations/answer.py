"""What the gateway reads of a Responses answer as it relays it: its usage, whether its stream ended,
and the response to keep for the turns that continue it.

The relay passes the engine's bytes through (``Exchange``); ``ResponsesAnswer`` watches them. A
stream ends with ``response.completed`` (or ``.incomplete``, ``.failed``), never with chat's
``[DONE]``; that last event carries the whole response, so only it is kept and parsed, once. The
response is stored before the client's answer ends, so a client that continues at once finds it.
A turn sent as a continued conversation says so again in its answer: the engine, sent the whole
conversation, answers ``"previous_response_id": null``, which becomes the id the client sent.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from policies.answers.usage import RESPONSES_USAGE, streamed_completion_tokens, usage_in
from policies.prompt.responses import stored_response
from policies.refusals import Refused
from proxy.conversations.store import ResponseStore

log = logging.getLogger("prefixgate")

# An event's name starts its line; in an event's JSON data a newline is always escaped ("\\n"), so text that
# quotes a marker never has one before it.
_LAST_EVENTS = (b"\nevent: response.completed", b"\nevent: response.incomplete", b"\nevent: response.failed")
_MARKER_SPAN = max(map(len, _LAST_EVENTS))
_EVENT_END = b"\n\n"
_NO_PREVIOUS = b'"previous_response_id":null'


class ResponsesAnswer:
    """One Responses request's answer, as the relay sees it (the ``AnswerTap`` an ``Outgoing`` carries)."""

    __slots__ = ("_final", "_held", "_previous", "_tail", "body", "earlier", "history", "store", "tenant")
    cut_off = False  # a Responses answer is read to the engine's end

    def __init__(self, store: ResponseStore | None, tenant: str, body: dict[str, Any], previous: str | None,
                 history: int = 0, earlier: tuple[str, ...] = ()) -> None:
        self.store = store  # None: ``store: false``, keep nothing
        self.tenant = tenant
        self.body = body  # as the engine was sent it: its items after ``history`` are the turn's, to keep
        self.history = history  # its first items: the turns recalled (``earlier``), kept already
        self.earlier = earlier
        self._previous = b'"previous_response_id":' + orjson.dumps(previous) if previous is not None else None
        self._final: list[bytes] | None = None  # the last event, from its first byte
        self._tail = b""  # the end of the last chunk: a marker may be cut in two
        self._held = b""  # the end of the last chunk that may begin ``_NO_PREVIOUS``: sent with the next

    @property
    def ended(self) -> bool:
        """The last event came whole: its name at a line's start, and its blank line."""
        return self._final is not None and b"".join(self._final[-2:]).endswith(_EVENT_END)

    def relay(self, chunk: bytes) -> bytes:
        """A streamed chunk on its way out: watched for the last event, the previous id put back (a
        read may end inside the field: its start waits for the next chunk)."""
        if self._previous is not None:
            chunk = self._held + chunk
            if _NO_PREVIOUS in chunk:
                chunk = chunk.replace(_NO_PREVIOUS, self._previous)
            cut = _field_start_at_end(chunk)
            chunk, self._held = (chunk[:-cut], chunk[-cut:]) if cut else (chunk, b"")
        if self._final is not None:
            self._final.append(chunk)
        else:
            window = self._tail + chunk
            at = max(window.rfind(marker) for marker in _LAST_EVENTS)
            if at >= 0:
                self._final = [window[at + 1:]]
            self._tail = window[-_MARKER_SPAN:]
        return chunk

    def stream_usage(self, events: int) -> tuple[int | None, int | None]:
        prompt, completion = usage_in(b"".join(self._final), RESPONSES_USAGE) if self._final else (None, None)
        return prompt, completion if completion is not None else streamed_completion_tokens(events)

    async def stream_done(self) -> tuple[bytes, bool]:
        """The stream ended whole: keep its response (the last event's ``response``); nothing more to send."""
        if self.store is not None and self._final is not None:
            await self._keep_final(b"".join(self._final))
        return b"", True

    async def _keep_final(self, event: bytes) -> None:
        start = event.find(b"data:")
        try:
            response = orjson.loads(event[start + 5:]).get("response") if start >= 0 else None
        except orjson.JSONDecodeError:
            response = None
        if isinstance(response, dict):
            await self._keep(response)

    async def whole(self, body: bytes) -> tuple[bytes, tuple[int | None, int | None]]:
        """A whole answer (200) on its way out: the previous id put back, kept, and its usage."""
        if self._previous is not None:
            body = body.replace(_NO_PREVIOUS, self._previous, 1)
        if self.store is not None:
            try:
                response = orjson.loads(body)
            except orjson.JSONDecodeError:
                response = None
            if isinstance(response, dict):
                await self._keep(response)
        return body, usage_in(body, RESPONSES_USAGE)

    async def _keep(self, response: dict[str, Any]) -> None:
        stored = stored_response(self.body, response, self.history, self.earlier)
        response_id = response.get("id")
        if stored is None or self.store is None or not isinstance(response_id, str):
            return
        try:
            await self.store.put(self.tenant, response_id, stored)
        except Refused:  # the answer still goes out; a turn that continues it will be told the store is down
            log.warning("response %s was answered but not stored", response_id[:80])


def _field_start_at_end(chunk: bytes) -> int:
    """How many bytes at the end of ``chunk`` are the start of ``_NO_PREVIOUS`` (0: none)."""
    for size in range(min(len(_NO_PREVIOUS) - 1, len(chunk)), 0, -1):
        if chunk.endswith(_NO_PREVIOUS[:size]):
            return size
    return 0
