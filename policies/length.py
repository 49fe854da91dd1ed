"""Output-length prediction: how many tokens an answer will take, before the engine writes it.

The gateway routes by it (a short-answer pool keeps chat replies from queueing behind long
generations) and reserves rate-limit tokens by it. The best signal is what the same tenant's same
kind of request produced before: requests that share a system prompt (a template) ask the same
kind of question, so each (tenant, template) keeps a window of its last completion lengths, and
their quantiles are the prediction. Until a key has a few samples a prior decides from the
request alone: the client's max_tokens is an upper bound it chose; tool calls and JSON answers are
short; with nothing known the answer is assumed long, since sending a long answer to the short pool
costs more than the reverse.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

MIN_SAMPLES = 8  # below this a key's history is too thin to trust
RECENT = 64  # completion lengths kept per key for quantiles
UNKNOWN_P90 = 1024  # no max_tokens, no history, nothing that says short
TOOLS_P90 = 256  # a tool call's arguments, as JSON
JSON_P90 = 512  # a structured answer


@dataclass(frozen=True, slots=True)
class LengthFeatures:
    max_tokens: int | None
    tools: bool = False
    json_answer: bool = False


def features_of(body: dict[str, Any], max_tokens: int | None) -> LengthFeatures:
    response_format = body.get("response_format")
    json_answer = isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema")
    tools = bool(body.get("tools")) and body.get("tool_choice") != "none"
    return LengthFeatures(max_tokens, tools, json_answer)


@dataclass(frozen=True, slots=True)
class Prediction:
    p50: int
    p90: int
    p95: int
    source: Literal["history", "prior"]


class LengthHistory:
    """Recent completion lengths of one (tenant, template), kept sorted too for quantiles."""

    __slots__ = ("count", "recent", "sorted")

    def __init__(self) -> None:
        self.count = 0
        self.recent: deque[int] = deque()
        self.sorted: list[int] = []

    def observe(self, tokens: int) -> None:
        self.count += 1
        self.recent.append(tokens)
        bisect.insort(self.sorted, tokens)
        if len(self.recent) > RECENT:
            del self.sorted[bisect.bisect_left(self.sorted, self.recent.popleft())]

    def quantile(self, q: float) -> int:
        values = self.sorted
        return values[min(len(values) - 1, int(q * len(values)))]


def predict(features: LengthFeatures, history: LengthHistory | None) -> Prediction:
    """Predicted completion tokens per choice; never above the request's max_tokens."""
    cap = features.max_tokens
    if history is not None and history.count >= MIN_SAMPLES:
        p50, p90, p95 = history.quantile(0.5), history.quantile(0.9), history.quantile(0.95)
        source: Literal["history", "prior"] = "history"
    else:
        p90 = UNKNOWN_P90
        if features.tools:
            p90 = TOOLS_P90
        elif features.json_answer:
            p90 = JSON_P90
        if cap is not None:
            p90 = min(p90, cap) if features.tools or features.json_answer else cap
        p50, p95 = p90 // 2, p90
        source = "prior"
    if cap is not None:
        p50, p90, p95 = min(p50, cap), min(p90, cap), min(p95, cap)
    return Prediction(p50, p90, p95, source)


PoolKind = Literal["any", "short", "long"]


@dataclass(frozen=True, slots=True)
class PoolOption:
    name: str
    kind: PoolKind
    short_threshold: int


def choose_by_length(options: list[PoolOption], predicted_p90: int) -> PoolOption:
    """Among the pools that serve the model: a short pool when the answer is predicted to fit its
    threshold, else the first pool that is not short; short pools take all only when alone."""
    for option in options:
        if option.kind == "short" and predicted_p90 <= option.short_threshold:
            return option
    for option in options:
        if option.kind != "short":
            return option
    return options[0]
