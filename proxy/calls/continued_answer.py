"""One answer from two legs: the short pool's, cut at its threshold, and the long pool's continuation.

``ContinuedAnswer`` is the ``AnswerTap`` of a call that starts short (``policies.routing.continuation``). The
``Exchange`` of each leg hands it what the engine sent; it reads every event (it needs the short leg's
text to continue from) and sends on what the client is to see:

- the short leg's events as they came, except its ``finish_reason: "length"`` (the answer goes on: its
  text is sent without it), its usage and its ``[DONE]``; where the client has stop strings, the leg's last
  characters wait until the long leg's first ones show whether a stop straddles the seam (``SeamStop``);
- the long leg's events with the short leg's ``id``, ``created`` and ``model``, without its opening role
  event; one usage event at the end (when the client asked for one) with the short leg's prompt tokens and
  both legs' completion tokens, then ``[DONE]``.

A JSON answer is the short leg's, with the two texts joined, the long leg's finish reason and the summed
usage. What the seam cost is kept for the metrics: ``seam_gap`` (the short leg's last token to the long
leg's first) and ``prefilled`` (the prompt tokens the long leg's engine was sent).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import orjson

from policies.routing.continuation import Cut, SeamStop, continues

Usage = tuple[int | None, int | None]
_DATA = b"data: "
_DONE = b"data: [DONE]\n\n"


class ContinuedAnswer:
    __slots__ = ("buffer", "chat", "client_usage", "continuing", "cut", "cut_off", "done", "finish", "head",
                 "held", "ident", "leg", "leg_events", "produced", "seam", "seam_gap", "seam_open", "short_end",
                 "text", "usage", "whole_answer")

    def __init__(self, cut: Cut, endpoint: str, *, client_usage: bool, stops: tuple[str, ...]) -> None:
        self.cut = cut
        self.chat = endpoint == "chat"
        self.client_usage = client_usage  # the client asked for a stream's usage event
        self.seam = SeamStop(stops) if stops else None
        self.leg = 1
        self.buffer = b""  # the start of an event not yet whole
        self.ident: dict[str, Any] = {}  # the short leg's id, created, model: the answer's
        self.text: list[str] = []  # the short leg's text, all of it
        self.held: list[tuple[bytes, str]] = []  # short-leg events not sent yet, and their text
        self.finish: tuple[bytes, dict[str, Any]] | None = None  # the short leg's last event
        self.usage: list[dict[str, Any] | None] = [None, None]  # each leg's usage, as the engine said
        self.leg_events = 0  # events with text or a finish, this leg
        self.done = False  # this leg's stream ended ([DONE], or a stop across the seam)
        self.cut_off = False  # a stop across the seam ended the answer: stop reading the long leg
        self.continuing = False  # the short leg was cut: the long leg follows
        self.produced = 0  # the short leg's completion tokens
        self.seam_open = False  # held text waits for the long leg's first characters
        self.head = ""  # the long leg's text while the seam is open
        self.short_end: float | None = None
        self.seam_gap: float | None = None
        self.whole_answer: dict[str, Any] | None = None  # a JSON short leg's answer

    # ---- the AnswerTap protocol --------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.done

    def relay(self, chunk: bytes) -> bytes:
        data = self.buffer + chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self.buffer = data
            return b""
        self.buffer = data[end + 2:]
        out = bytearray()
        for event in data[:end].split(b"\n\n"):
            if event == b"data: [DONE]":
                self.done = True
            elif event and not self.done:
                out += self._short_event(event) if self.leg == 1 else self._long_event(event)
        return bytes(out)

    def stream_usage(self, events: int) -> Usage:
        return self._summed()

    async def stream_done(self) -> tuple[bytes, bool]:
        """The leg's stream ended: what goes out now, and whether the answer ends here."""
        if self.leg == 1:
            return self._short_done()
        out = self._flush_held() if self.seam_open else b""
        if self.client_usage:
            out += self._event(None, None, self._summed_usage())
        return out + _DONE, True

    async def whole(self, body: bytes) -> tuple[bytes | None, Usage]:
        answer = orjson.loads(body)
        choice = answer["choices"][0]
        text = self._text_of(choice, "message")
        if self.leg == 1:
            self.usage[0] = answer.get("usage")
            self.text.append(text)
            self.ident = {key: answer.get(key) for key in ("id", "created", "model")}
            if self._cut_here(choice.get("finish_reason")):
                self.whole_answer = answer
                return None, self._summed()
            return body, self._summed()
        self.usage[1] = answer.get("usage")
        self.seam_gap = perf_counter() - self.short_end if self.short_end is not None else None
        joined, finish = self._joined("".join(self.text), text, choice.get("finish_reason"), choice.get("stop_reason"))
        whole = self.whole_answer or answer
        first = whole["choices"][0]
        if self.chat:
            first["message"] = {**first["message"], "content": joined}
        else:
            first["text"] = joined
        first["finish_reason"] = finish
        if "stop_reason" in first:
            first["stop_reason"] = choice.get("stop_reason") if finish == choice.get("finish_reason") else None
        whole["usage"] = self._summed_usage()
        return orjson.dumps(whole), self._summed()

    # ---- the legs ----------------------------------------------------------------------------------

    def long_leg(self) -> None:
        """The long leg begins: its events are read as the continuation."""
        self.leg, self.done, self.buffer, self.leg_events = 2, False, b"", 0
        self.seam_open = bool(self.held)

    @property
    def partial(self) -> str:
        return "".join(self.text)

    @property
    def prefilled(self) -> int | None:
        usage = self.usage[1]
        return usage.get("prompt_tokens") if isinstance(usage, dict) else None

    def _short_event(self, event: bytes) -> bytes:
        data = self._data(event)
        if data is None:
            return event + b"\n\n"
        if not self.ident:
            self.ident = {key: data.get(key) for key in ("id", "created", "model")}
        choices = data.get("choices")
        if not choices:
            if data.get("usage"):
                self.usage[0] = data["usage"]
                return b""
            return event + b"\n\n"
        choice = choices[0]
        text = self._text_of(choice, "delta")
        self.text.append(text)
        self.leg_events += bool(text) or choice.get("finish_reason") is not None
        if choice.get("finish_reason") is not None:
            self.finish = (event + b"\n\n", data)
            return b""
        if self.seam is None or not self.seam.hold:
            return event + b"\n\n"
        self.held.append((event + b"\n\n", text))
        return self._release_held(self.seam.hold)

    def _short_done(self) -> tuple[bytes, bool]:
        if self.finish is not None and self._cut_here(self.finish[1]["choices"][0].get("finish_reason")):
            text = self._text_of(self.finish[1]["choices"][0], "delta")
            if text:
                self.held.append((self._event(text, None), text))
            if self.seam is None or not self.seam.hold:
                return self._flush_held(), False
            return self._release_held(self.seam.hold), False
        out = self._flush_held() + (self.finish[0] if self.finish is not None else b"")
        if self.client_usage and self.usage[0] is not None:
            out += self._event(None, None, self.usage[0])
        return out + _DONE, True

    def _long_event(self, event: bytes) -> bytes:
        data = self._data(event)
        if data is None:
            return b""
        choices = data.get("choices")
        if not choices:
            if data.get("usage"):
                self.usage[1] = data["usage"]
            return b""
        choice = choices[0]
        text, finish = self._text_of(choice, "delta"), choice.get("finish_reason")
        if not text and finish is None:
            return b""  # the role event that opens a chat stream: the client had it
        self.leg_events += 1
        if self.seam_gap is None and self.short_end is not None:
            self.seam_gap = perf_counter() - self.short_end
        if not self.seam_open:
            return self._restamped(data)
        assert self.seam is not None
        self.head += text
        tail = "".join(text for _, text in self.held)
        at = self.seam.find(tail, self.head)
        if at is None and finish == "stop":
            at = self.seam.matched_by_engine(tail, self.head, choice.get("stop_reason"))
        if at is not None:  # a stop sequence across the seam: the answer ends where it begins
            self.held, self.seam_open, self.done, self.cut_off = [], False, True, True
            return self._event(tail[:at], "stop")
        if not self.seam.settled(self.head, finish is not None):
            self.held.append((self._restamped(data), ""))  # after the tail; its text is in ``head``
            return b""
        return self._flush_held() + self._restamped(data)

    # ---- pieces ------------------------------------------------------------------------------------

    def _cut_here(self, finish_reason: object) -> bool:
        """Whether the short leg, which ended with ``finish_reason``, was stopped by the cut: the answer goes on."""
        usage = self.usage[0]
        produced = usage.get("completion_tokens") if isinstance(usage, dict) else None
        self.produced = produced if isinstance(produced, int) else self.leg_events
        self.continuing = continues(self.cut, finish_reason, self.produced)
        if self.continuing:
            self.short_end = perf_counter()
        return self.continuing

    def _joined(self, first: str, second: str, finish: object, matched: object) -> tuple[str, object]:
        if self.seam is not None:
            tail = first[max(0, len(first) - self.seam.hold):] if self.seam.hold else ""
            at = self.seam.find(tail, second)
            if at is None and finish == "stop":
                at = self.seam.matched_by_engine(tail, second, matched)
            if at is not None:
                return first[:len(first) - len(tail) + at], "stop"
        return first + second, finish

    def _release_held(self, keep: int) -> bytes:
        """Send the held events the seam cannot need: all but those whose text makes the last ``keep``
        characters."""
        out = b""
        after = sum(len(text) for _, text in self.held)
        while len(self.held) > 1 and after - len(self.held[0][1]) >= keep:
            event, text = self.held.pop(0)
            after -= len(text)
            out += event
        return out

    def _flush_held(self) -> bytes:
        out = b"".join(event for event, _ in self.held)
        self.held, self.seam_open = [], False
        return out

    def _summed(self) -> Usage:
        """(prompt, completion) tokens so far: the short leg's prompt, both legs' completions (counted
        from their events where the engine gave no usage)."""
        first, second = (u if isinstance(u, dict) else {} for u in self.usage)
        completion = first.get("completion_tokens")
        if completion is None:
            completion = self.produced if self.leg == 2 else self.leg_events
        if self.leg == 2:
            more = second.get("completion_tokens")
            completion += more if more is not None else self.leg_events
        return first.get("prompt_tokens"), completion

    def _summed_usage(self) -> dict[str, Any]:
        prompt, completion = self._summed()
        usage = dict(self.usage[0]) if isinstance(self.usage[0], dict) else {}
        usage.update(prompt_tokens=prompt, completion_tokens=completion,
                     total_tokens=(prompt or 0) + (completion or 0))
        return usage

    def _text_of(self, choice: dict[str, Any], part: str) -> str:
        if not self.chat:
            text = choice.get("text")
        else:
            text = (choice.get(part) or {}).get("content")
        return text if isinstance(text, str) else ""

    @staticmethod
    def _data(event: bytes) -> dict[str, Any] | None:
        if not event.startswith(_DATA) or event == b"data: [DONE]":
            return None
        try:
            data = orjson.loads(event[len(_DATA):])
        except orjson.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None

    def _restamped(self, data: dict[str, Any]) -> bytes:
        data.update(self.ident)
        return _DATA + orjson.dumps(data) + b"\n\n"

    def _event(self, text: str | None, finish: str | None, usage: dict[str, Any] | None = None) -> bytes:
        """An event of the answer's own: text (or none, for the usage event) and a finish reason."""
        if text is None:
            choices: list[dict[str, Any]] = []
        elif self.chat:
            choices = [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}]
        else:
            choices = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
        event = {**self.ident, "object": "chat.completion.chunk" if self.chat else "text_completion",
                 "choices": choices}
        if usage is not None:
            event["usage"] = usage
        return _DATA + orjson.dumps(event) + b"\n\n"
