"""HTTP endpoints. The generation routes share one path: auth, read, validate, route, relay."""

from __future__ import annotations

import time
from time import perf_counter

import orjson
from starlette.requests import Request
from starlette.responses import Response

from policies.types import Endpoint, Rejection
from policies.validate import validate_request
from proxy.body import decode_json, read_body
from proxy.errors import OpenAIError
from proxy.gateway import Gateway
from proxy.relay import UpstreamCall


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status, media_type="application/json")


async def _proxy(request: Request, endpoint: Endpoint, path: str) -> Response:
    started = perf_counter()
    gateway: Gateway = request.state.gateway
    try:
        gateway.keys.tenant_for(request.headers.get("authorization"))
        raw = await read_body(request, gateway.config.server.max_body_bytes)
        view = validate_request(endpoint, decode_json(raw))
        if isinstance(view, Rejection):
            raise OpenAIError.from_rejection(view)
        pool = gateway.upstreams.pool_for(view.model, embeddings=endpoint == "embeddings")
        replica = pool.pick()
    except OpenAIError as error:
        gateway.metrics.observe_request(path, error.status, perf_counter() - started)
        return error.response()
    return UpstreamCall(  # type: ignore[return-value]  # an ASGI response, like Starlette's own
        pool=pool, replica=replica, path=path, body=raw, stream=view.stream,
        route=path, metrics=gateway.metrics, started=started,
    )


async def chat_completions(request: Request) -> Response:
    return await _proxy(request, "chat", "/chat/completions")


async def completions(request: Request) -> Response:
    return await _proxy(request, "completions", "/completions")


async def embeddings(request: Request) -> Response:
    return await _proxy(request, "embeddings", "/embeddings")


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
