"""Read and decode a JSON request body within the configured size limit."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from proxy.errors import OpenAIError


def _too_large(limit: int) -> OpenAIError:
    return OpenAIError(
        413, f"Request body exceeds the limit of {limit} bytes.", code="request_too_large"
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body; 413 as soon as it is known to exceed ``limit`` (before reading it all)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decode_json(raw: bytes) -> Any:
    if not raw:
        raise OpenAIError(400, "Request body is empty; expected a JSON object.", code="invalid_json")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(
            400, f"We could not parse the JSON body of your request: {exc}.", code="invalid_json"
        ) from None
