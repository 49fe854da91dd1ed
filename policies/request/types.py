"""Plain types shared by policies/ and proxy/: the ground floor everything may import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Endpoint = Literal["chat", "completions", "embeddings", "responses"]


@dataclass(frozen=True, slots=True)
class Rejection:
    """A decision to refuse a request, carried up to the HTTP layer as an OpenAI-shaped error."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str = "invalid_request_error"


@dataclass(frozen=True, slots=True)
class RequestView:
    """What the proxy needs to know about a validated request without re-reading the body."""

    endpoint: Endpoint
    model: str
    stream: bool
    include_usage: bool
    body: dict[str, Any]
