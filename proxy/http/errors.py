"""OpenAI-shaped errors: every error prefixgate itself produces looks like one from api.openai.com."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from policies.types import Rejection

_DEFAULT_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class OpenAIError(Exception):
    """Raised anywhere below the routes; turned into a JSON error response by the app's handler."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _DEFAULT_TYPES.get(status, "server_error")
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    @classmethod
    def from_rejection(cls, rejection: Rejection) -> OpenAIError:
        return cls(
            rejection.status, rejection.message, type=rejection.type, param=rejection.param, code=rejection.code
        )

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> Response:
        return Response(self.body(), self.status, headers=self.headers, media_type="application/json")

    async def send(self, send: Send) -> None:
        """Answer with this error on a bare ASGI ``send`` (the hot routes have no Response objects)."""
        body = self.body()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def sse_error_event(message: str, type: str, code: str | None = None) -> bytes:
    """The last event of a stream that broke after its first byte: the status line is long gone."""
    return b"data: " + error_body(message, type, None, code) + b"\n\n"


async def openai_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OpenAIError)
    return exc.response()


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 answers, in OpenAI's shape so SDKs can parse them."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"Unknown route: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return OpenAIError(exc.status_code, message, headers=exc.headers).response()


async def unexpected_error_handler(request: Request, exc: Exception) -> Response:
    """Last resort: a bug must still answer in OpenAI's shape, without a traceback in the body."""
    return OpenAIError(500, "Internal error in prefixgate.", type="server_error").response()
