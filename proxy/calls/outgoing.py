"""A call's request as it goes upstream (``Outgoing``, decided by the route) and what the call learned of
the answer (``Outcome``, filled in by the ``Exchange`` as the call goes); what the client was sent is its
``ClientAnswer``'s."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.calls.answer_tap import AnswerTap
from proxy.upstream.placement import Placement
from proxy.upstream.replica import Replica
from proxy.wire.headers import ResponseHeaders

CLIENT_CLOSED = 499  # nginx's code for "client closed the request", used in metrics only


@dataclass(slots=True)
class Outgoing:
    """The request as it goes upstream, decided by the route."""

    path: str  # appended to the replica's base URL (…/v1)
    body: bytes
    stream: bool
    model: str
    placement: Placement  # the prompt's place among the pool's replicas, for the replica choice (``Pool.pick``)
    headers: ResponseHeaders  # prefixgate's own response headers, as the steps reported them
    fallback: str | None = None  # retrieved evidence to answer with if the model cannot
    hide_usage: bool = False  # the gateway asked for the stream's usage event; the client did not
    tap: AnswerTap | None = None  # reads the answer in place of chat's framing (Responses, a continued answer)


@dataclass(slots=True)
class Outcome:
    """What the call learned of the answer: filled in as it goes."""

    usage: tuple[int | None, int | None] = (None, None)  # (prompt, completion) tokens, where known
    streamed: float | None = None  # seconds from a stream's first chunk to its last
    first_chunk: float | None = None  # when the stream's first chunk came (perf_counter), of its first leg
    replica: Replica | None = field(default=None)  # the replica that holds the request (after any retry)
