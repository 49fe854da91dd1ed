"""The HTTP clients a gateway can send with, by the name ``server.http_client`` gives."""

from __future__ import annotations

from proxy.transports.aiohttp_transport import AiohttpTransport
from proxy.transports.base import TransportFactory
from proxy.transports.httpx_transport import HttpxTransport

CLIENTS: dict[str, TransportFactory] = {"aiohttp": AiohttpTransport, "httpx": HttpxTransport}
