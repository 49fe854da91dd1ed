"""Transport on httpx: the alternative measured against aiohttp in docs/benchmarks.md."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx

from proxy.transports.base import UpstreamBroken, UpstreamTimeout, UpstreamUnreachable


class HttpxReply:
    __slots__ = ("_chunks", "_response", "content_type", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] = response.aiter_raw()
        self.status = response.status_code
        self.content_type = response.headers.get("content-type", "application/json")

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.TransportError as exc:
            raise UpstreamBroken(str(exc) or type(exc).__name__) from exc

    async def next_chunk(self) -> bytes:
        try:
            return await anext(self._chunks, b"")
        except httpx.TransportError as exc:
            raise UpstreamBroken(str(exc) or type(exc).__name__) from exc

    async def close(self, *, abort: bool) -> None:
        # httpcore drops a connection whose body was not read to the end, so the server sees the
        # disconnect and aborts; a fully read one goes back to the pool.
        await self._response.aclose()


class HttpxTransport:
    def __init__(
        self, *, connect_timeout: float, headers: Mapping[str, str], max_connections: int, keepalive: float
    ) -> None:
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=connect_timeout, read=None, write=None, pool=None),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=keepalive,
            ),
            headers=dict(headers),
        )

    async def post(self, url: str, body: bytes) -> HttpxReply:
        request = self._client.build_request("POST", url, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.ConnectTimeout as exc:
            raise UpstreamTimeout(f"connecting to {url} timed out") from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(f"{url}: {exc}") from exc
        return HttpxReply(response)

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        try:
            response = await self._client.get(url, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"GET {url} timed out") from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(f"GET {url}: {exc}") from exc
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._client.aclose()
