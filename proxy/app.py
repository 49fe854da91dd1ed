"""The gateway's ASGI app: the generation routes behind ``FastPath``, the rest a Starlette app."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from policies.refusals import Refused
from proxy.clock import SYSTEM_CLOCK, Clock
from proxy.config.gateway import Config
from proxy.config.load import config_from_dump
from proxy.connections.guard import ConnectionGuard, file_limit
from proxy.gateway import Gateway
from proxy.http import responses_routes as stored
from proxy.http import service_routes as routes
from proxy.http.dialect import CHAT, COMPLETIONS, EMBEDDINGS
from proxy.http.generation import GenerationRoute
from proxy.http.messages_dialect import COUNT_TOKENS, MESSAGES
from proxy.http.responses_dialect import RESPONSES
from proxy.http.route_explain import route_explainer
from proxy.observability.metrics import Metrics
from proxy.retrieval.retriever import StoreOpener
from proxy.transports.base import TransportFactory
from proxy.wire.errors import http_exception_handler, refused_handler, unexpected_error_handler

ENV_RESOLVED_CONFIG = "PREFIXGATE_RESOLVED_CONFIG"


class FastPath:
    """Send POSTs on the generation paths straight to their routes; everything else to ``app``.

    The generation routes skip Starlette's router and middleware (see ``GenerationRoute``); Starlette
    also mounts the same route objects, so 405s and odd paths keep its behaviour. ``FastPath`` is the
    app uvicorn serves, so it also carries the ``connection_guard`` that the server's protocol
    (``GuardedHttpToolsProtocol``) reports connections to."""

    __slots__ = ("app", "connection_guard", "routes")

    def __init__(self, app: ASGIApp, routes: dict[str, GenerationRoute],
                 connection_guard: ConnectionGuard | None = None) -> None:
        self.app = app
        self.routes = routes
        self.connection_guard = connection_guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.routes.get(scope["path"])
            if route is not None:
                await route(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(config: Config, *, open_store: StoreOpener | None = None, transports: TransportFactory | None = None,
               clock: Clock = SYSTEM_CLOCK) -> ASGIApp:
    """The gateway's ASGI app. Seams for tests: ``open_store`` replaces the configured vector store,
    ``transports`` the HTTP client of every upstream (e.g. answering in memory), ``clock`` the
    monotonic clock of back-offs, rate windows and retry pauses, and of the waits it times: pool queues,
    upstream timeouts, SSE keep-alives and health checks (one a test moves forward)."""
    metrics = Metrics()
    guard = ConnectionGuard(config.server.connection_limits(file_limit()), metrics.connections)
    generation = {
        "/v1/chat/completions": GenerationRoute(CHAT),
        "/v1/completions": GenerationRoute(COMPLETIONS),
        "/v1/embeddings": GenerationRoute(EMBEDDINGS),
        "/v1/responses": GenerationRoute(RESPONSES),
        "/v1/messages": GenerationRoute(MESSAGES),
        "/v1/messages/count_tokens": GenerationRoute(COUNT_TOKENS),
    }

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Gateway]]:
        gateway = await Gateway.start(config, metrics, open_store=open_store, transports=transports, clock=clock)
        try:
            yield {"gateway": gateway}
        finally:
            await gateway.aclose()

    starlette = Starlette(
        routes=[
            *(Route(path, route, methods=["POST"]) for path, route in generation.items()),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/v1/responses/{response_id}", stored.get_response, methods=["GET"]),
            Route("/v1/responses/{response_id}", stored.delete_response, methods=["DELETE"]),
            Route("/health", routes.health, methods=["GET"]),
            Route("/ready", routes.ready, methods=["GET"]),
            Route("/metrics", routes.metrics, methods=["GET"]),
            Route("/openapi.json", routes.openapi, methods=["GET"]),
            Route("/admin/route/v1/chat/completions", route_explainer(CHAT), methods=["POST"]),
            Route("/admin/route/v1/completions", route_explainer(COMPLETIONS), methods=["POST"]),
            Route("/admin/route/v1/responses", route_explainer(RESPONSES), methods=["POST"]),
            Route("/admin/route/v1/messages", route_explainer(MESSAGES), methods=["POST"]),
        ],
        exception_handlers={
            Refused: refused_handler,
            HTTPException: http_exception_handler,
            Exception: unexpected_error_handler,
        },
        lifespan=lifespan,
    )
    return FastPath(starlette, generation, guard)


def app_from_environment() -> ASGIApp:
    """Factory for uvicorn workers: each process rebuilds the app from the config the CLI resolved."""
    return create_app(config_from_dump(os.environ[ENV_RESOLVED_CONFIG]))
