"""The headers prefixgate reads from clients and adds to its answers (``x-prefixgate-*``), and the
request headers a generation route reads, from the raw ASGI header list in one pass."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Scope

RETRIEVAL = b"x-prefixgate-retrieval"  # from the client: "off", this request goes without added context
POOL = b"x-prefixgate-pool"  # from the client: the pool to use; in answers: the pool that took it
OVERFLOW = b"x-prefixgate-overflow"  # in answers: the pool that shed the request to the one that took it


@dataclass(slots=True)
class RequestHeaders:
    """The request headers the gateway reads, from the raw ASGI header list in one pass."""

    authorization: str | None = None
    length: bytes | None = None
    retrieval: bool = True  # not turned off by x-prefixgate-retrieval
    pool: str | None = None  # the pool x-prefixgate-pool names

    @classmethod
    def of(cls, scope: Scope) -> RequestHeaders:
        authorization = length = pool = None
        retrieval = True
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"content-length":
                length = value
            elif name == RETRIEVAL:
                retrieval = value.strip().lower() != b"off"
            elif name == POOL:
                pool = value.decode("latin-1").strip()
        return cls(authorization, length, retrieval, pool)
