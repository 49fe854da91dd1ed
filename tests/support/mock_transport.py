"""In-memory upstreams for ``create_app(transports=...)``: each replica's requests go to a handler
instead of a socket, the way httpx's MockTransport serves a client.

A handler takes ``(url, body)`` (body: the JSON bytes the gateway sends; b"" for a GET) and returns a
``MockReply`` or raises one of the transport errors (``UpstreamUnreachable`` for a refused
connection); ``MockEngine`` (``tests.support.mock_engine``) answers as an engine does. ``MockUpstreams``
records every call, so a test can say which replica got what.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import orjson

from proxy.transports.base import Reply, Transport


@dataclass
class MockReply:
    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    content_type: str = "application/json"

    @classmethod
    def json(cls, data: object, status: int = 200) -> MockReply:
        return cls(status, [orjson.dumps(data)])

    async def read(self) -> bytes:
        body, self.chunks = b"".join(self.chunks), []
        return body

    async def next_chunk(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    async def close(self, *, abort: bool) -> None:
        self.chunks = []


Handler = Callable[[str, bytes], MockReply]


@dataclass
class Call:
    method: str
    url: str
    body: bytes


class MockTransport:
    """One replica's ``Transport``: ``handler`` answers what the gateway sends."""

    def __init__(self, handler: Handler, calls: list[Call]) -> None:
        self.handler = handler
        self.calls = calls

    async def post(self, url: str, body: bytes) -> Reply:
        self.calls.append(Call("POST", url, body))
        return self.handler(url, body)

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        self.calls.append(Call("GET", url, b""))
        reply = self.handler(url, b"")
        return reply.status, await reply.read()

    async def aclose(self) -> None:
        pass


class MockUpstreams:
    """A ``TransportFactory``: every transport it makes answers with ``handler`` and logs to ``calls``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[Call] = []

    def __call__(self, *, connect_timeout: float, headers: Mapping[str, str], max_connections: int,
                 keepalive: float) -> Transport:
        return MockTransport(self.handler, self.calls)

    def posts(self) -> list[Call]:
        return [call for call in self.calls if call.method == "POST"]
