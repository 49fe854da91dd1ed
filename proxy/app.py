"""The Starlette application factory."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route

from proxy import routes
from proxy.config import Config, config_from_dump
from proxy.errors import OpenAIError, http_exception_handler, openai_error_handler, unexpected_error_handler
from proxy.gateway import Gateway
from proxy.metrics import Metrics

ENV_RESOLVED_CONFIG = "PREFIXGATE_RESOLVED_CONFIG"


def create_app(config: Config) -> Starlette:
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Gateway]]:
        gateway = await Gateway.start(config, metrics)
        try:
            yield {"gateway": gateway}
        finally:
            await gateway.aclose()

    return Starlette(
        routes=[
            Route("/v1/chat/completions", routes.chat_completions, methods=["POST"]),
            Route("/v1/completions", routes.completions, methods=["POST"]),
            Route("/v1/embeddings", routes.embeddings, methods=["POST"]),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/health", routes.health, methods=["GET"]),
            Route("/ready", routes.ready, methods=["GET"]),
            Route("/metrics", routes.metrics, methods=["GET"]),
        ],
        exception_handlers={
            OpenAIError: openai_error_handler,
            HTTPException: http_exception_handler,
            Exception: unexpected_error_handler,
        },
        lifespan=lifespan,
    )


def app_from_environment() -> Starlette:
    """Factory for uvicorn workers: each process rebuilds the app from the config the CLI resolved."""
    return create_app(config_from_dump(os.environ[ENV_RESOLVED_CONFIG]))
