"""``POST /admin/route/v1/chat/completions`` (and ``.../v1/completions``): where this gateway would send a
request now, and why.

An operator asks it why a prompt went to the engine it went to; the routing benchmark asks every gateway
replica the same question at the same moment to measure whether they choose alike, which ``balance:
prefix`` and ``kv_events`` promise without the replicas talking to each other. The body is the request as
a client would send it; the tenant is named in ``x-prefixgate-tenant`` (the admin key is no tenant's).

The request goes through its own steps up to the replica choice: validation, the tenant's canonical
rewrite, the output-length prediction, the pool, the cache salt, the prompt's key on the ring and the
blocks each engine holds (``Pool.place``), then ``Pool.explain``. Nothing is taken or counted: no
slot, no rate-limit charge, no memory of the choice, no metric, no upstream call. Retrieval is not run:
its passages go after the prefix the engines hold, so they change the choice only when an engine holds
the same passages after the same prefix.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from policies.admission.length import Prediction
from policies.admission.refusals import AdminOnly, Refused, UnknownTenant
from policies.admission.token_caps import cap_output
from policies.prompt.prompt import rewrite_chat
from policies.prompt.stable_prefix import chat_pieces, completion_pieces
from policies.request.types import Endpoint, RequestView
from policies.routing.continuation import continuable, cut_of
from proxy.auth.tenants import TenantPolicy
from proxy.config.gateway import OPEN_TENANT
from proxy.gateway import Gateway
from proxy.http.body import ClientGone, checked_request, read_body
from proxy.upstream.pool import Pool
from proxy.wire import headers as x_prefixgate


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


def _continuation(gateway: Gateway, pool: Pool, reason: str, view: RequestView, body: dict[str, Any],
                  may_cut: bool, prediction: Prediction | None) -> dict[str, Any]:
    """Whether the request starts short (cut at the short pool's threshold, continued in the long pool) and
    why: the share of its template's answers within the threshold (None: not known yet) against the pool's
    ``long_when_short_below``, or what rules a cut out."""
    model = view.model
    short = next((p for p in gateway.upstreams.short_pools if gateway.upstreams.continues_in(p, model)), None)
    if short is None or prediction is None:
        return {}
    threshold, share = short.option.short_threshold, prediction.short_share
    starts = may_cut and pool is short and reason not in ("named", "merged")
    cut = cut_of(body, threshold, view.output_fields) if starts else None
    why = ("the answer may not be cut (tools, response_format, guided decoding, n, logprobs, echo, seed or an output "
           "penalty)"
           if not may_cut else "the client named the pool" if reason == "named"
           else f"its own max_tokens fits {threshold}" if pool is short and cut is None
           else "no history yet: unknown templates start short" if share is None
           else f"{share:.0%} of its template's answers fit {threshold} (long below "
                f"{short.option.long_when_short_below:.0%})")
    return {"starts_short": cut is not None, "cut_at": threshold if cut is not None else None,
            "continues_in": gateway.upstreams.continues_in(short, model).name if cut is not None else None,
            "short_share": share, "why": why}


def route_explainer(endpoint: Endpoint) -> Any:
    """The Starlette endpoint that explains the choice for requests of ``endpoint`` (chat or completions)."""

    async def explain(request: Request) -> Response:
        gateway: Gateway = request.state.gateway
        if not gateway.keys.is_admin(request.headers.get("authorization")):
            raise Refused(AdminOnly(request.url.path))
        tenant = _tenant(gateway, request)
        try:
            raw = await read_body(request.receive, request.headers.get("content-length", "").encode() or None,
                                  gateway.config.server.max_body_bytes)
        except ClientGone:
            return Response(status_code=499)  # nobody is left to read it; uvicorn sends nothing
        view = checked_request(endpoint, raw, gateway.input_limits)
        body = view.body
        if endpoint == "chat":
            body = rewrite_chat(body, tenant.prompt).body
            pieces = chat_pieces(body)
        else:
            pieces = completion_pieces(body)
        prediction, may_cut = None, continuable(body, endpoint)
        if gateway.admission.predicts:  # the pool by output length, as ``Admission.prepare`` predicts it
            capped = cap_output(body, tenant.admission.caps, view.output_fields)
            if isinstance(capped, dict):
                body, prediction = capped, gateway.admission.predict(capped, pieces, tenant.name, endpoint)[2]
        pool, pool_reason = gateway.upstreams.pool_for(
            view.model, predicted_p90=prediction.p90 if prediction is not None else None,
            short_share=prediction.short_share if prediction is not None else None,
            continuable=prediction is not None and may_cut, named=request.headers.get(x_prefixgate.POOL.decode()))
        answer: dict[str, Any] = {"tenant": tenant.name, "model": view.model, "pool": pool.name,
                                  "pool_reason": pool_reason,
                                  "predicted_output_p90": prediction.p90 if prediction is not None else None}
        answer |= _continuation(gateway, pool, pool_reason, view, body, may_cut, prediction)
        salt = tenant.salt.upstream_salt(body.get("cache_salt"))
        explained = pool.explain(pool.place(pieces, body, view.model, salt))
        if explained is not None:  # a pool that picks replicas
            answer |= {"replica": explained.replica, "reason": explained.reason, "replicas": explained.replicas}
        return Response(orjson.dumps(answer), media_type="application/json")

    return explain
