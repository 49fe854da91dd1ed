"""``POST /admin/route/v1/chat/completions`` (and ``.../v1/completions``): where this gateway would send a
request now, and why.

An operator asks it why a prompt went to the engine it went to; the routing benchmark asks every gateway
replica the same question at the same moment to measure whether they choose alike, which ``balance:
prefix`` and ``kv_events`` promise without the replicas talking to each other. The body is the request as
a client would send it; the tenant is named in ``x-prefixgate-tenant`` (the admin key is no tenant's).

The request goes through its own steps up to the replica choice: validation, the tenant's canonical
rewrite, the output-length prediction, the pool, the cache salt, the prompt's key on the ring and the
blocks each engine holds (``Pool.prompt_place``), then ``Pool.explain``. Nothing is taken or counted: no
slot, no rate-limit charge, no memory of the choice, no metric, no upstream call. Retrieval is not run:
its passages go after the prefix the engines hold, so they change the choice only when an engine holds
the same passages after the same prefix.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from policies.input_limits import check_input_limits
from policies.prompt import rewrite_chat
from policies.refusals import AdminOnly, Refused, UnknownTenant
from policies.stable_prefix import chat_pieces, completion_pieces
from policies.token_caps import cap_output
from policies.types import Endpoint, Rejection
from policies.validate import validate_request
from proxy.auth.keys import OPEN_TENANT
from proxy.auth.tenants import TenantPolicy
from proxy.gateway import Gateway
from proxy.http.body import ClientGone, decode_json, read_body
from proxy.wire import headers as x_prefixgate

TENANT_HEADER = "x-prefixgate-tenant"


def _tenant(gateway: Gateway, request: Request) -> TenantPolicy:
    """The tenant ``x-prefixgate-tenant`` names; in open mode its one tenant when the header is absent."""
    name = request.headers.get(TENANT_HEADER)
    if name is None:
        if gateway.keys.open_mode:
            name = OPEN_TENANT
        else:
            raise Refused(UnknownTenant(None))
    tenant = gateway.tenants.get(name.strip())
    if tenant is None:
        raise Refused(UnknownTenant(name))
    return tenant


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
        decoded = decode_json(raw)
        refused = check_input_limits(endpoint, raw, decoded, gateway.input_limits)
        if refused is not None:
            raise Refused(refused)
        view = validate_request(endpoint, decoded)
        if isinstance(view, Rejection):
            raise Refused(view)
        body = view.body
        if endpoint == "chat":
            body = rewrite_chat(body, tenant.prompt).body
            pieces = chat_pieces(body)
        else:
            pieces = completion_pieces(body)
        predicted = None
        if gateway.admission.predicts:  # the pool by output length, as ``Admission.prepare`` predicts it
            capped = cap_output(body, tenant.admission.caps)
            if isinstance(capped, dict):
                predicted = gateway.admission.predict(capped, pieces, tenant.name)[2].p90
        pool, pool_reason = gateway.upstreams.pool_for(view.model, predicted_p90=predicted,
                                                       named=request.headers.get(x_prefixgate.POOL.decode()))
        answer: dict[str, Any] = {"tenant": tenant.name, "model": view.model, "pool": pool.name,
                                  "pool_reason": pool_reason, "predicted_output_p90": predicted}
        if pool.has_replicas:
            salt = tenant.salt.upstream_salt(body.get("cache_salt"))
            key, held = pool.prompt_place(pieces, body, view.model, salt)
            explained = pool.explain(key, held)
            answer |= {"replica": explained.replica, "reason": explained.reason, "replicas": explained.replicas}
        return Response(orjson.dumps(answer), media_type="application/json")

    return explain
