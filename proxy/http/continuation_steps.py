"""The steps of a request that starts in a short pool whose cut answers go on in the long pool
(``continue_long``): whether this one may (``starts_short``: an answer that may be cut, a client that
allowed more than the cut), and its long leg as it goes to a pool (``long_leg_out``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from policies.admission.token_caps import TokenCaps, cap_output, requested_output
from policies.refusals import Refused, Rejection
from policies.request.types import Endpoint, RequestView
from policies.routing.continuation import bounded_by, continuable, continuation_body, cut_body, cut_of, stops_of
from proxy.calls.call import Continuation
from proxy.calls.continued_answer import ContinuedAnswer
from proxy.calls.outgoing import Outgoing
from proxy.http.prompt import Planned, Prompt
from proxy.upstream.pool import Pool
from proxy.upstream.pools import Upstreams
from proxy.wire.headers import ResponseHeaders


def starts_short(upstreams: Upstreams, endpoint: Endpoint, pool: Pool, view: RequestView, prompt: Prompt,
                 planned: Planned, out: Outgoing, long_leg: Callable[[Pool, ContinuedAnswer], Outgoing],
                 long_caps: Callable[[Pool], TokenCaps | None]) -> Continuation | None:
    """Where the answer goes on when ``pool``'s engine cuts it, with ``out`` made the short leg (its
    output cut at the pool's threshold, its answer read by the ``ContinuedAnswer``); None where ``pool``
    does not continue answers, this one may not be cut, or its client's own cap fits the cut.

    The long pool's caps (``long_caps``, with the tenant's action) are read now, not at the seam: a request the
    long pool refuses is refused before the short engine works on it, as it is when named to that pool, and
    one it clamps is cut at most where the long pool would end it (``bounded_by``)."""
    long = upstreams.continues_in(pool, view.model)
    if long is None or not long.continues_answers or not continuable(prompt.body, endpoint):
        return None
    cut = cut_of(planned.shaped.body, pool.option.short_threshold, view.output_fields)
    if cut is None:
        return None
    caps = long_caps(long)
    if caps is not None:
        allowed = cap_output(prompt.body, caps, view.output_fields)
        if isinstance(allowed, Rejection):
            raise Refused(allowed)
        cut = bounded_by(cut, requested_output(allowed, view.output_fields)[1])
    body = sent_body(planned)
    answer = ContinuedAnswer(cut, endpoint, client_usage=view.include_usage, stops=stops_of(body))
    cut_leg = cut_body(body, cut)
    if view.stream:  # the leg's completion tokens, from its usage, say whether the cut stopped it
        cut_leg["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    out.body, out.tap, out.hide_usage = orjson.dumps(cut_leg), answer, False
    return Continuation(answer, long, long_leg)


def long_leg_out(endpoint: Endpoint, route: str, pool: Pool, view: RequestView, prompt: Prompt, planned: Planned,
                 answer: ContinuedAnswer, headers: ResponseHeaders) -> Outgoing:
    """The long leg as it goes to ``pool``: the request as ``planned`` for it, with the short leg's text to
    continue from; its place among the pool's replicas read from that body, the partial answer part of
    the prompt whose blocks an engine may hold. Where the pool sends priority hints, the leg gets the
    first place (0): its client is mid-answer, and the seam's wait is all it sees of the long pool."""
    body = continuation_body(sent_body(planned), endpoint, answer.partial, answer.produced, stream=view.stream)
    if planned.plan.priority is not None:  # priority hints: an answer its client is already reading goes first
        body["priority"] = 0
    placement = pool.place(prompt.pieces, body, view.model, planned.plan.salt)
    return Outgoing(route, orjson.dumps(body), view.stream, view.model, placement, headers, tap=answer)


def sent_body(planned: Planned) -> dict[str, Any]:
    """The body exactly as planned to be sent: a body nothing else changed gains the plan's fields in its
    bytes only (``with_field``: the cache salt, the usage option), so it is read from them."""
    body: dict[str, Any] = orjson.loads(planned.shaped.raw)
    return body
