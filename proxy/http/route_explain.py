"""``POST /admin/route/v1/chat/completions`` (and ``.../v1/completions``, ``.../v1/responses``,
``.../v1/messages``): where this gateway would send a request now, and why.

An operator asks it why a prompt went to the engine it went to; the routing benchmark asks every gateway
replica the same question at the same moment to measure whether they choose alike, which ``balance:
prefix`` and ``kv_events`` promise without the replicas talking to each other. The body is the request as
a client would send it; the tenant is named in ``x-prefixgate-tenant`` (the admin key is no tenant's).

The request goes through the route's own steps (``Preparation``) with their effects off, up to the replica
choice: validation, the tenant's canonical rewrite, admission's caps and output-length prediction, the pool,
the call as planned for it (its caps, the cache salt), the cut where it starts short, the prompt's key on
the ring and the blocks each engine holds (``Pool.place``), then ``Pool.explain``. Nothing is taken or
counted: no slot, no rate-limit charge, no memory of the choice, no metric, no upstream call. Retrieval is
not run: its passages go after the prefix the engines hold, so they change the choice only when an engine
holds the same passages after the same prefix. A Responses turn's stored conversation is read as it is, its
expiry left alone.

A request that names its agent session (``X-Claude-Code-Session-Id``, ``metadata.user_id``: ``body_session``)
is keyed on the ring by the session: the answer says so (``session``, ``keyed_by``). A refusal is the route's,
in the dialect's error shape.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from policies.refusals import AdminOnly, InternalError, Refused, UnknownTenant
from policies.request.types import RequestView
from proxy.auth.tenants import TenantPolicy
from proxy.calls.call import Continuation
from proxy.config.gateway import OPEN_TENANT
from proxy.gateway import Gateway
from proxy.http.body import ClientGone
from proxy.http.dialect import Dialect
from proxy.http.preparation import Preparation
from proxy.observability.request_record import RequestRecord
from proxy.upstream.pool import Pool
from proxy.wire import headers as x_prefixgate
from proxy.wire.headers import RequestHeaders, request_authorization

log = logging.getLogger("prefixgate")


def _tenant(gateway: Gateway, request: Request) -> TenantPolicy:
    """The tenant ``x-prefixgate-tenant`` names; in open mode its one tenant when the header is absent."""
    name = request.headers.get(x_prefixgate.TENANT.decode())
    if name is None:
        if gateway.keys.open_mode:
            name = OPEN_TENANT
        else:
            raise Refused(UnknownTenant(None))
    tenant = gateway.tenants.get(name.strip())
    if tenant is None:
        raise Refused(UnknownTenant(name))
    return tenant


def _continuation(gateway: Gateway, steps: Preparation, pool: Pool, view: RequestView,
                  continuation: Continuation | None) -> dict[str, Any]:
    """Whether the request starts short (cut at the short pool's threshold, continued in the long pool) and
    why: the share of its template's answers within the threshold (None: not known yet) against the pool's
    ``long_when_short_below``, or what rules a cut out."""
    model = view.model
    short = next((p for p in gateway.upstreams.short_pools if gateway.upstreams.continues_in(p, model)), None)
    prediction, admitted = steps.prediction, steps.admitted
    if short is None or prediction is None:
        return {}
    threshold, share = short.option.short_threshold, prediction.short_share
    may_cut = admitted is not None and admitted.may_cut
    why = ("the answer may not be cut (tools, response_format, guided decoding, n, logprobs, echo, seed or an output "
           "penalty)"
           if not may_cut else "the client named the pool" if steps.reason == "named"
           else (f"its template's last answers all ended well {'within' if pool is short else 'past'} {threshold}: "
                 f"placed by its own history, {'not cut' if pool is short else 'starts long'}")
           if steps.reason == "history"
           else (f"its template's last answers all ended well within {threshold}, but the short pool serves requests "
                 "the merge placed: placed by the merge, not cut")
           if steps.reason == "merged"
           else f"its own max_tokens fits {threshold}" if pool is short and continuation is None
           else "no history yet: unknown templates start short" if share is None
           else f"{share:.0%} of its template's answers fit {threshold} (long below "
                f"{short.option.long_when_short_below:.0%})")
    return {"starts_short": continuation is not None,
            "cut_at": continuation.answer.cut.at if continuation is not None else None,
            "continues_in": continuation.long.name if continuation is not None else None,
            "short_share": share, "why": why}


def route_explainer(dialect: Dialect) -> Any:
    """The Starlette endpoint that explains the choice for requests of ``dialect``; it refuses as the route does,
    in the dialect's error shape (Anthropic's for the Messages API)."""

    async def explain(request: Request) -> Response:
        try:
            answer = await _explained(request, dialect)
        except ClientGone:
            return Response(status_code=499)  # nobody is left to read it; uvicorn sends nothing
        except Exception as failure:
            if not isinstance(failure, Refused):
                log.exception("unexpected error explaining %s", request.url.path)
            refusal = failure.refusal if isinstance(failure, Refused) else InternalError()
            return dialect.errors.error(refusal).response()
        return Response(orjson.dumps(answer), media_type="application/json")

    return explain


async def _explained(request: Request, dialect: Dialect) -> dict[str, Any]:
    """The request's own steps with their effects off, up to the replica choice, and what decided each."""
    gateway: Gateway = request.state.gateway
    if not gateway.keys.is_admin(request_authorization(request.headers)):
        raise Refused(AdminOnly(request.url.path))
    tenant = _tenant(gateway, request)
    record = RequestRecord(gateway.metrics, None, dialect.upstream_path, counted=False)
    steps = Preparation(gateway, dialect, record, effects=False)
    headers = RequestHeaders.of(request.scope)
    view, prompt = await steps.read(headers, request.receive)
    pool = await steps.route(view, prompt, tenant, headers)
    planned = steps.plan(view, prompt, tenant, pool, headers)
    out = steps.outgoing(pool, view, tenant, prompt, planned)
    continuation = steps.continuation(pool, view, tenant, prompt, planned, out, headers)
    prediction, key = steps.prediction, out.placement.key
    answer: dict[str, Any] = {"tenant": tenant.name, "model": view.model, "pool": pool.name,
                              "pool_reason": steps.reason,
                              "predicted_output_p90": prediction.p90 if prediction is not None else None,
                              "session": steps.session,
                              "keyed_by": None if key is None else "session" if steps.session is not None else "prefix"}
    answer |= _continuation(gateway, steps, pool, view, continuation)
    explained = pool.explain(out.placement)
    if explained is not None:  # a pool that picks replicas
        answer |= {"replica": explained.replica, "reason": explained.reason, "replicas": explained.replicas}
    return answer
