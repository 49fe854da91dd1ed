"""``GET`` and ``DELETE /v1/responses/{id}``: a tenant's stored responses, from the gateway's store.

Answered here, never by an engine: vLLM keeps responses only in one replica's memory, and only when
switched on. An id the tenant has no response under (unknown, expired, deleted, another tenant's)
gets OpenAI's 404, the same in every case.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from policies.prompt.responses import response_not_found
from policies.refusals import Refused
from proxy.gateway import Gateway
from proxy.wire.headers import request_authorization


def _json(payload: object) -> Response:
    return Response(orjson.dumps(payload), media_type="application/json")


async def get_response(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    tenant = gateway.keys.tenant_for(request_authorization(request.headers))
    response_id = request.path_params["response_id"]
    stored = await gateway.responses.get(tenant, response_id)
    if stored is None:
        raise Refused(response_not_found(response_id))
    return _json(stored.response)


async def delete_response(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    tenant = gateway.keys.tenant_for(request_authorization(request.headers))
    response_id = request.path_params["response_id"]
    if not await gateway.responses.delete(tenant, response_id):
        raise Refused(response_not_found(response_id))
    return _json({"id": response_id, "object": "response", "deleted": True})
