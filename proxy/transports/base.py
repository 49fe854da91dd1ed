"""The seam between the proxy and an HTTP client library: a tiny protocol and its failures.

Two clients implement it (aiohttp and httpx); the overhead benchmark picks the default. Tests
and later features (retries, health checks) depend only on this protocol and these errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from policies.vocabulary import Vocabulary


class ErrorKind(Vocabulary):
    """What went wrong with an exchange: the values of prefixgate_upstream_errors_total's ``kind`` label (each
    failure's ``kind``, and a 5xx answer, which the exchange counts as status_5xx). The metric's help is written
    from it."""

    CONNECT = "connect", "the replica could not be reached, or closed the connection before answering"
    TIMEOUT = "timeout", "no answer within one of the pool's timeouts"
    BROKEN = "broken", "the answer started and then broke off"
    ERROR = "error", "another failure of the HTTP client"
    STATUS_5XX = "status_5xx", "the replica answered with a 5xx status"


class UpstreamError(Exception):
    """An upstream exchange failed; ``kind`` is the metric label and decides the status code."""

    kind = ErrorKind.ERROR


class UpstreamUnreachable(UpstreamError):
    """Connection refused, reset before an answer, DNS failure: nothing was answered (502)."""

    kind = ErrorKind.CONNECT


class UpstreamTimeout(UpstreamError):
    """No answer within a configured timeout (504 before the first byte)."""

    kind = ErrorKind.TIMEOUT


class UpstreamBroken(UpstreamError):
    """The answer started and then broke off (connection lost mid-body)."""

    kind = ErrorKind.BROKEN


class Reply(Protocol):
    """An upstream answer whose status and headers have arrived and whose body has not."""

    status: int
    content_type: str

    async def read(self) -> bytes:
        """The whole body (non-streaming answers and errors)."""

    async def next_chunk(self) -> bytes:
        """The next piece of body exactly as it arrived; b"" at the end."""

    async def close(self, *, abort: bool) -> None:
        """Give the connection back (abort=False) or drop it so the server stops work (abort=True)."""


class Transport(Protocol):
    """One keep-alive connection pool to one replica."""

    async def post(self, url: str, body: bytes) -> Reply: ...

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


class TransportFactory(Protocol):
    """Makes a replica's ``Transport``: one of ``CLIENTS`` by ``server.http_client``, or what a test hands
    ``create_app`` to answer in memory."""

    def __call__(self, *, connect_timeout: float, headers: Mapping[str, str], max_connections: int,
                 keepalive: float) -> Transport: ...
