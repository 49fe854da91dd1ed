"""The light HTTP endpoints (models, health, readiness, metrics, the OpenAPI document); generation
is ``GenerationRoute``."""

from __future__ import annotations

import time
from functools import cache

import orjson
from starlette.requests import Request
from starlette.responses import Response

from policies.refusals import AdminOnly, Refused
from proxy.gateway import Gateway
from proxy.http.openapi_document import openapi_document
from proxy.wire.headers import request_authorization


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status, media_type="application/json")


async def models(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    gateway.keys.tenant_for(request_authorization(request.headers))
    cards = await gateway.upstreams.list_models()
    created = int(time.time())
    # vLLM's `root` is the model's path on the engine's disk: no client's business. It becomes the id.
    data = [{"object": "model", "created": created, "owned_by": "prefixgate", **card,
             **({"root": card["id"]} if "root" in card else {})} for card in cards]
    return _json({"object": "list", "data": data})


async def health(request: Request) -> Response:
    return _json({"status": "ok"})


async def ready(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    replicas = await gateway.upstreams.readiness()
    is_ready = any(replicas.values())
    status: dict[str, object] = {"status": "ready" if is_ready else "unavailable"}
    if gateway.keys.is_admin(request_authorization(request.headers)):  # replica addresses are the operator's
        status["replicas"] = replicas
    return _json(status, 200 if is_ready else 503)


async def metrics(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    if not gateway.keys.is_admin(request_authorization(request.headers)):
        raise Refused(AdminOnly("/metrics"))
    return Response(gateway.metrics.render(), media_type=gateway.metrics.content_type)


@cache
def _openapi_document() -> bytes:
    """The OpenAPI document (``openapi_document``) as JSON, read once per process (the first GET /openapi.json)."""
    return orjson.dumps(openapi_document())


async def openapi(request: Request) -> Response:
    return Response(_openapi_document(), media_type="application/json")
