"""The cheapest possible hop: a TCP forwarder that copies bytes and parses nothing.

A control for the overhead benchmark. Whatever latency it adds is what any extra process on the
path costs on this machine (two more socket reads and writes, two more wake-ups); what
prefixgate adds beyond it is its own HTTP and policy work.

    python tests/bench/tcp_forwarder.py LISTEN_PORT UPSTREAM_PORT
"""

from __future__ import annotations

import asyncio
import sys

import uvloop


class _Upstream(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.transport.close()


class _Client(asyncio.Protocol):
    """One upstream connection per client connection; bytes that arrive before it opens wait."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.pending: list[bytes] = []
        self.upstream: _Upstream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, upstream = await loop.create_connection(lambda: _Upstream(self), "127.0.0.1", self.upstream_port)
        self.upstream = upstream
        for data in self.pending:
            upstream.transport.write(data)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.pending.append(data)
        else:
            self.upstream.transport.write(data)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def serve(listen_port: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream_port), "127.0.0.1", listen_port)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))
