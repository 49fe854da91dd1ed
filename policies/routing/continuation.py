"""Start short, continue long: an answer cut at a short pool's threshold and continued in the long pool.

Routing by predicted length pays only when nearly every short answer reaches the short pool, and no
predictor that reads a request places the apps whose lengths straddle the threshold. So a request that may
be cut starts in the short pool with its output capped at the threshold T; when the short engine stops it
there (``finish_reason: "length"``) and the client allowed more, the gateway sends the same request with the
partial answer to the long pool, which writes the rest (vLLM's ``continue_final_message`` for chat; the
prompt plus the partial text for completions). A misplaced long answer then costs one extra prefill of its
prompt and T tokens, not a short pool held for the whole answer.

What may be cut: plain text only (``continuable``), sampled token by token from the text so far, so that the
long leg draws each token as the one engine would have. A grammar (tools, ``response_format``, guided
decoding) restarted mid-answer would not be the same grammar's state; ``n``, ``best_of``, ``logprobs`` and
``echo`` describe one generation; a ``seed`` names one random sequence, which a second engine would start
over; ``presence_penalty`` and ``frequency_penalty`` count the tokens the answer wrote, which the long leg's
engine reads as prompt. Those go by prediction, as without continuation.

The engine that continues checks stop sequences only in what it writes, so one that starts in the short
leg's last characters and ends in the long leg's is found here (``SeamStop``): the short leg's last
``len(longest stop) - 1`` characters are held back until the long leg's text settles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.admission.token_caps import requested_output
from policies.request.types import OUTPUT_FIELDS, Endpoint

GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")
ONE_GENERATION_FIELDS = ("logprobs", "top_logprobs", "echo", "prompt_logprobs", "suffix", "seed")
# Penalties on what the answer itself has written: the long leg's engine reads the short leg's text as prompt, so
# it would not count those tokens (vLLM's repetition_penalty counts prompt and output alike, and keeps its meaning).
OUTPUT_PENALTIES = ("presence_penalty", "frequency_penalty")


def continuable(body: dict[str, Any], endpoint: str) -> bool:
    """Whether an answer to ``body`` may be cut and continued: a plain-text chat or completion, one
    choice, no log probabilities, no grammar, not itself a continuation."""
    if endpoint == "chat":
        if body.get("tools") or body.get("functions") or body.get("continue_final_message"):
            return False
        response_format = body.get("response_format")
        if response_format is not None and not (isinstance(response_format, dict)
                                                and response_format.get("type") == "text"):
            return False
    elif endpoint == "completions":
        prompt = body.get("prompt")
        if not isinstance(prompt, str) and not (isinstance(prompt, list) and len(prompt) == 1
                                                and isinstance(prompt[0], str)):
            return False
    else:
        return False
    if any(body.get(name) is not None and body.get(name) is not False for name in ONE_GENERATION_FIELDS):
        return False
    if any(body.get(name) is not None for name in GUIDED_FIELDS):
        return False
    if any(body.get(name) not in (None, 0) for name in OUTPUT_PENALTIES):
        return False
    return body.get("n") in (None, 1) and body.get("best_of") in (None, 1)


def starts_short(short_share: float | None, long_below: float) -> bool:
    """A request starts in the short pool unless its template's history says a short answer is unlikely:
    ``short_share``, the share of its recent answers within the threshold, below ``long_below``. A
    template without enough history (None) starts short."""
    return short_share is None or short_share >= long_below


@dataclass(frozen=True, slots=True)
class Cut:
    """Where a request that starts short is cut, and what its client allowed."""

    at: int  # the short pool's threshold T
    field: str  # the output field the request names (or its endpoint's)
    allowed: int | None  # the client's cap, as admitted (None: none)


def cut_of(body: dict[str, Any], threshold: int, fields: tuple[str, ...]) -> Cut | None:
    """The cut for ``body`` (whose endpoint reads its output cap from ``fields``) in a short pool of
    ``threshold``; None where its own cap already fits."""
    field, allowed = requested_output(body, fields)
    if allowed is not None and allowed <= threshold:
        return None
    return Cut(threshold, field, allowed)


def bounded_by(cut: Cut, long_allows: int | None) -> Cut:
    """The cut where the long pool allows fewer tokens than the client asked (its caps clamped the request):
    the whole answer ends within them, so the short leg too, and the long leg writes no more than is left."""
    if long_allows is None or (cut.allowed is not None and cut.allowed <= long_allows):
        return cut
    return Cut(min(cut.at, long_allows), cut.field, long_allows)


def cut_body(body: dict[str, Any], cut: Cut) -> dict[str, Any]:
    """The short leg's body: the output capped at the threshold, and a ``min_tokens`` above it lowered to it
    (vLLM refuses a minimum above the maximum; the long leg asks for the rest)."""
    shaped = {**body, cut.field: cut.at}
    minimum = body.get("min_tokens")
    if isinstance(minimum, int) and minimum > cut.at:
        shaped["min_tokens"] = cut.at
    return shaped


def continues(cut: Cut, finish_reason: object, produced: int) -> bool:
    """The short leg was stopped by the cut, not by the model or the client's own cap."""
    return finish_reason == "length" and produced >= cut.at and (cut.allowed is None or cut.allowed > produced)


def continuation_body(body: dict[str, Any], endpoint: Endpoint, text: str, produced: int, *,
                      stream: bool) -> dict[str, Any]:
    """The long leg's body: ``body`` (the request as planned for the long pool) with the partial answer
    ``text`` to continue from, and what the client allowed less what was ``produced``. A stream asks for
    its usage: the prompt tokens the long engine was sent are counted."""
    field, allowed = requested_output(body, OUTPUT_FIELDS[endpoint])
    continued = dict(body)
    if endpoint == "chat":
        continued["messages"] = [*body["messages"], {"role": "assistant", "content": text}]
        continued["continue_final_message"] = True
        continued["add_generation_prompt"] = False
    else:
        prompt = body["prompt"]
        continued["prompt"] = (prompt if isinstance(prompt, str) else prompt[0]) + text
    if allowed is not None:
        continued[field] = max(1, allowed - produced)
    minimum = body.get("min_tokens")
    if isinstance(minimum, int) and minimum:
        continued["min_tokens"] = max(0, minimum - produced)
    if stream:
        continued["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return continued


def stops_of(body: dict[str, Any]) -> tuple[str, ...]:
    """The client's stop strings."""
    stop = body.get("stop")
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list):
        return tuple(s for s in stop if isinstance(s, str) and s)
    return ()


class SeamStop:
    """A stop sequence that straddles the seam: it starts in the short leg's held-back tail and ends in
    the long leg's first characters. ``hold`` is how many characters of the short leg to hold back."""

    __slots__ = ("hold", "stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1

    def find(self, tail: str, head: str) -> int | None:
        """Where in ``tail`` (the held-back end of the short leg) a stop begins that ends in ``head`` (the
        long leg's first characters, at least ``hold`` of them unless that leg ended); None if none does."""
        joined = tail + head
        found = [at for stop in self.stops if (at := joined.find(stop)) != -1 and at < len(tail)]
        return min(found) if found else None

    def matched_by_engine(self, tail: str, head: str, matched: object) -> int | None:
        """Where in ``tail`` the stop ``matched`` begins when the engine that continued found it itself
        (vLLM reads a continued assistant message's text with what it writes, stops, and leaves out of its
        output only the part it wrote): the earliest place from which the joined text is a beginning of it."""
        if not isinstance(matched, str) or matched not in self.stops:
            return None
        joined = tail + head
        return next((at for at in range(len(tail)) if matched.startswith(joined[at:])), None)

    def settled(self, head: str, ended: bool) -> bool:
        """Whether ``head`` is long enough to rule on every stop that could straddle the seam."""
        return ended or len(head) >= self.hold
