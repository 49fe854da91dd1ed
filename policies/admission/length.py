"""Output-length prediction: how many tokens an answer will take, before the engine writes it.

The gateway routes by it (a short-answer pool keeps chat replies from queueing behind long
generations) and reserves rate-limit tokens by it. The best signal is what the same tenant's same
kind of request produced before: requests that share a system prompt (a template) ask the same
kind of question, so each (tenant, template) keeps a window of its last completion lengths, and
their quantiles are the prediction. Until a key has a few samples a prior decides from the
request alone: the client's max_tokens is an upper bound it chose; tool calls and JSON answers are
short; with nothing known the answer is assumed long, since sending a long answer to the short pool
costs more than the reverse.

The template (``length_key``) is what says which app asked: the tools and the system and developer
messages before the conversation, never the user's words (under a one-line system prompt they made
every request a key of its own, which never learned), plus the step: an agent's request that carries a
tool's result asks for a different kind of answer (often the long final one) than one that does not
(often a short tool call), and a JSON answer differs from prose. A history that sees its last
``SHIFT`` answers all beyond its old range (an app whose answers changed) forgets the old ones at
once, where a plain window of 64 took most of 64 answers to follow a fall.

A split into short and long pools helps short answers only when nearly all of them reach the short
pool: one short answer in twenty sent to a congested long pool sets the short answers' p95 by itself.
So a short pool keeps a ``ShortRecall``, the share of the recent truly short answers that the rule
sent (or would have sent) to it, and the split holds only while that share is at least the pool's
``min_recall``; below it, ``split_pays`` is false and requests go to the less loaded of the short and
the long pool, as one pool. The split then costs nothing where answers cannot be told apart from
their requests (a chat app whose lengths straddle the threshold), and resumes once they can.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Literal

MIN_SAMPLES = 8  # below this a key's history is too thin to trust
RECENT = 64  # completion lengths kept per key for quantiles
SHIFT = 8  # this many answers in a row past the window's p10..p90 mean the app changed (odds 0.1^8 by chance)
# A template whose last DECISIVE answers all fell a factor DECISIVE_MARGIN or more to one side of the short pool's
# threshold is routed by them, whatever the pool-wide recall: on the prediction bench's workload (3 seeds, a
# threshold of 256; tests/bench/decisive_templates.py) the next answer fell on the same side 99.8 % of the time, for
# 31 % of its requests (98.6 % with no margin, 99.2 % with 6 answers).
DECISIVE = 8
DECISIVE_MARGIN = 2
TEMPLATE_CHARS = 512  # the template's characters that identify it
_TEMPLATE_ROLES = ("<system>", "<developer>")
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
    text = body.get("text")
    if response_format is None and isinstance(text, dict):  # the Responses API's place for it
        response_format = text.get("format")
    json_answer = isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema")
    tools = bool(body.get("tools")) and body.get("tool_choice") != "none"
    return LengthFeatures(max_tokens, tools, json_answer)


Side = Literal["short", "long"]


@dataclass(frozen=True, slots=True)
class Prediction:
    p50: int
    p90: int
    p95: int
    source: Literal["history", "prior"]
    short_share: float | None = None  # of the history's answers, the share within the short threshold
    decided: Side | None = None  # the side of the short threshold the template's last answers all fell on


Step = Literal["turn", "after-tool", "prompt"]


def step_of(pieces: Sequence[str], chat: bool) -> Step:
    """A chat's step: whether its last message is a tool's result; a completion is a ``prompt``."""
    if not chat:
        return "prompt"
    return "after-tool" if len(pieces) >= 2 and pieces[-2] == "<tool>" else "turn"


def length_key(pieces: Sequence[str], chat: bool, tenant: str, model: str, json_answer: bool) -> int:
    """The (tenant, model, template, step) whose answers predict this request's.

    ``pieces`` as ``policies.prompt.stable_prefix.chat_pieces`` renders a chat (the tools' JSON, then a role
    marker and a text per message) or a completion's prompt. A chat's template is its tools and leading
    system and developer messages; its step, whether its last message is a tool's result. A completion
    has no roles: its first characters stand for the template.
    """
    template: list[str] = []
    step = step_of(pieces, chat)
    if chat:
        first = 1 if pieces and not pieces[0].startswith("<") else 0  # the tools' JSON starts with "["
        template.extend(pieces[:first])
        for index in range(first, len(pieces) - 1, 2):
            if pieces[index] not in _TEMPLATE_ROLES:
                break
            template.append(pieces[index + 1])
    else:
        template.extend(pieces[:1])
    head = "\x00".join(template)[:TEMPLATE_CHARS]
    text = "\x00".join((tenant, model, step, "json" if json_answer else "text", head))
    return int.from_bytes(blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


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
        if len(self.recent) >= 2 * SHIFT and self._shifted():
            for _ in range(len(self.recent) - SHIFT):
                del self.sorted[bisect.bisect_left(self.sorted, self.recent.popleft())]

    def _shifted(self) -> bool:
        """The last ``SHIFT`` answers all lie above the older ones' p90, or all below their p10."""
        older = sorted(list(self.recent)[:-SHIFT])
        low, high = older[int(0.1 * len(older))], older[min(len(older) - 1, int(0.9 * len(older)))]
        last = list(self.recent)[-SHIFT:]
        return all(tokens > high for tokens in last) or all(tokens < low for tokens in last)

    def decided(self, threshold: int, answers: int = DECISIVE) -> Side | None:
        """``short`` where the last ``answers`` were all at most ``threshold / DECISIVE_MARGIN`` tokens, ``long``
        where all were at least ``threshold * DECISIVE_MARGIN``; None for a history thinner or mixed (or ``answers``
        0: off). One answer out of line ends it, so an app that changes goes back to the pool-wide rule at once, and
        is decided again on its new side ``answers`` later."""
        recent = self.recent
        if answers < 1 or len(recent) < answers:
            return None
        last = [recent[index] for index in range(len(recent) - answers, len(recent))]
        if max(last) * DECISIVE_MARGIN <= threshold:
            return "short"
        if min(last) >= threshold * DECISIVE_MARGIN:
            return "long"
        return None

    def share_within(self, tokens: int) -> float:
        """The share of the recent answers of at most ``tokens``."""
        return bisect.bisect_right(self.sorted, tokens) / len(self.sorted)

    def quantile(self, q: float) -> int:
        values = self.sorted
        return values[min(len(values) - 1, int(q * len(values)))]


def predict(features: LengthFeatures, history: LengthHistory | None, short_threshold: int | None = None,
            decided_after: int = DECISIVE) -> Prediction:
    """Predicted completion tokens per choice; never above the request's max_tokens. With a
    ``short_threshold`` and a history to read, also the share of its answers within it."""
    cap = features.max_tokens
    share = decided = None
    if history is not None and history.count >= MIN_SAMPLES:
        p50, p90, p95 = history.quantile(0.5), history.quantile(0.9), history.quantile(0.95)
        source: Literal["history", "prior"] = "history"
        if short_threshold is not None:
            share = history.share_within(short_threshold)
            decided = history.decided(short_threshold, decided_after)
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
        if decided == "long" and short_threshold is not None and cap <= short_threshold:
            decided = None  # the client's own cap keeps this answer short
    return Prediction(p50, p90, p95, source, share, decided)


PoolKind = Literal["any", "short", "long"]
RECALL_WINDOW = 512  # truly short answers a short pool's recall is measured over
RECALL_SAMPLES = 64  # below this many, the recall is unknown and the split waits


@dataclass(frozen=True, slots=True)
class PoolOption:
    name: str
    kind: PoolKind
    short_threshold: int
    min_recall: float = 0.0
    continue_long: bool = False  # a short pool: answers that may be cut start here (``policies.routing.continuation``)
    long_when_short_below: float = 0.2
    decided_after: int = DECISIVE  # a template's own answers place it after this many (``LengthHistory.decided``)


class ShortRecall:
    """Of the recent answers within a short pool's threshold, which ones the prediction sent to it."""

    __slots__ = ("caught", "recent", "threshold")

    def __init__(self, threshold: int, window: int = RECALL_WINDOW) -> None:
        self.threshold = threshold
        self.recent: deque[bool] = deque(maxlen=window)
        self.caught = 0  # how many of ``recent`` are True

    def observe(self, predicted_p90: int, actual: int) -> None:
        if actual > self.threshold:
            return
        if len(self.recent) == self.recent.maxlen and self.recent[0]:
            self.caught -= 1
        caught = predicted_p90 <= self.threshold
        self.recent.append(caught)
        self.caught += caught

    @property
    def recall(self) -> float | None:
        return self.caught / len(self.recent) if len(self.recent) >= RECALL_SAMPLES else None


def split_pays(recall: float | None, min_recall: float) -> bool:
    """Whether a short pool should take only the answers predicted short: yes once its measured recall
    reaches ``min_recall`` (0: always, the recall unmeasured included)."""
    if min_recall <= 0:
        return True
    return recall is not None and recall >= min_recall


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
