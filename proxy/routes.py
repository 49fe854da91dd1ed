"""The light HTTP endpoints (models, health, readiness, metrics); generation lives in generation.py."""

from __future__ import annotations

import time

import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.gateway import Gateway


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status, media_type="application/json")


async def models(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    gateway.keys.tenant_for(request.headers.get("authorization"))
    cards = await gateway.upstreams.list_models()
    created = int(time.time())
    data = [{"object": "model", "created": created, "owned_by": "prefixgate", **card} for card in cards]
    return _json({"object": "list", "data": data})


async def health(request: Request) -> Response:
    return _json({"status": "ok"})


async def ready(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    replicas = await gateway.upstreams.readiness()
    is_ready = any(replicas.values())
    return _json({"status": "ready" if is_ready else "unavailable", "replicas": replicas}, 200 if is_ready else 503)


async def metrics(request: Request) -> Response:
    gateway: Gateway = request.state.gateway
    return Response(gateway.metrics.render(), media_type=gateway.metrics.content_type)
