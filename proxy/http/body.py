"""Read and decode a JSON request body within the configured size limit, straight from ASGI receive, and
check it (``checked_request``): the first step of a generation request and of the route explainer."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import Receive

from policies.refusals import Refused, Rejection
from policies.request.input_limits import InputLimits, check_input_limits
from policies.request.types import Endpoint, RequestView
from policies.request.validate import validate_request


class ClientGone(Exception):
    """The client disconnected before its request body arrived; there is no one to answer."""


def _too_large(limit: int) -> Refused:
    return Refused(Rejection(413, f"Request body exceeds the limit of {limit} bytes (server.max_body_bytes).",
                             code="request_too_large"))


async def read_body(receive: Receive, declared_length: bytes | None, limit: int) -> bytes:
    """The raw body; 413 as soon as it is known to exceed ``limit`` (before reading it all)."""
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        more = message.get("more_body", False)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decode_json(raw: bytes) -> Any:
    if not raw:
        raise Refused(Rejection(400, "Request body is empty; expected a JSON object.", code="invalid_json"))
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Refused(Rejection(400, f"We could not parse the JSON body of your request: {exc}.",
                                code="invalid_json")) from None


def checked_request(endpoint: Endpoint, raw: bytes, limits: InputLimits) -> RequestView:
    """The body decoded once, within the input limits, validated; raises the refusal of the first that fails."""
    decoded = decode_json(raw)
    refused = check_input_limits(endpoint, raw, decoded, limits)
    if refused is not None:
        raise Refused(refused)
    view = validate_request(endpoint, decoded)
    if isinstance(view, Rejection):
        raise Refused(view)
    return view
