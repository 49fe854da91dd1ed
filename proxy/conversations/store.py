"""Where stored responses live: Redis when configured (shared by every gateway process, kept across
restarts), else this process's memory, bounded; each under its tenant, for ``responses.ttl_s``.

A key is the tenant's name and the response's id together, so a tenant can never read, continue or
delete another tenant's response: its id under another tenant is simply not there (the same 404 as an
unknown id). Unlike the caches (``TieredCache``), a missing answer here is not a miss to work around:
Redis down means a continued turn cannot be built, so it is refused with a 503 and Retry-After
(``StateUnavailable``), and no in-process tier sits in front of Redis, which would keep a deleted
response alive in the other processes.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import orjson
from cachetools import TTLCache
from redis.asyncio import Redis
from redis.exceptions import RedisError

from policies.prompt.responses import StoredResponse
from policies.refusals import Refused, StateUnavailable
from proxy.clock import Clock
from proxy.config.redis import RedisConfig
from proxy.config.responses import ResponsesConfig

log = logging.getLogger("prefixgate")

REDIS_PREFIX = b"prefixgate:turns:"  # a turn linked to the turns before it (``earlier``)
# Where responses were kept before turns were linked, each with its whole conversation's input: still read, never
# written, so a gateway of the older form sharing the Redis finds no linked turn (a 404) rather than reading one
# as a whole conversation and sending the engine a cut history.
OLD_REDIS_PREFIX = b"prefixgate:responses:"
# What one entry holds besides its bytes: the bytes object's header, the (tenant, id) key and its strings,
# the cache's own bookkeeping and its tables' slack (traced: 440 to 630 bytes with a 37-character id).
ENTRY_OVERHEAD = 768


def _encode(stored: StoredResponse) -> bytes:
    """The turn's input items, the response and the earlier turns' ids; its output items are the response's own
    (kept once)."""
    return orjson.dumps({"input": stored.input, "response": stored.response, "earlier": stored.earlier})


def _decode(raw: bytes | str) -> StoredResponse:
    """A stored turn; one stored before turns were linked (no ``earlier``) holds its whole conversation's input."""
    value: dict[str, Any] = orjson.loads(raw)
    return StoredResponse(value["input"], value["response"]["output"], value["response"],
                          tuple(value.get("earlier") or ()))


class ResponseStore(Protocol):
    async def get(self, tenant: str, response_id: str) -> StoredResponse | None: ...

    async def recall(self, tenant: str, response_ids: tuple[str, ...]) -> list[StoredResponse | None]: ...

    async def put(self, tenant: str, response_id: str, stored: StoredResponse) -> None: ...

    async def delete(self, tenant: str, response_id: str) -> bool: ...

    async def aclose(self) -> None: ...


class MemoryResponses:
    """One process's stored responses, serialized (so their size is known and a reader can never change
    one), the least recently used dropped past ``max_bytes``, each gone ``ttl_s`` after it was written.

    ``max_bytes`` bounds what the entries hold in memory, not only their JSON's length: orjson returns its
    bytes in the buffer it wrote them into (4 KiB at least, and up to twice the length), so each is kept as
    an exact-size copy, counted with the entry's own overhead (``ENTRY_OVERHEAD``)."""

    def __init__(self, ttl_s: float, max_bytes: int, clock: Clock) -> None:
        self.ttl_s = ttl_s
        self.entries: TTLCache[tuple[str, str], bytes] = TTLCache(
            max_bytes, ttl_s, timer=clock, getsizeof=_held)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        raw = self.entries.get((tenant, response_id))
        return None if raw is None else _decode(raw)

    async def recall(self, tenant: str, response_ids: tuple[str, ...]) -> list[StoredResponse | None]:
        """Earlier turns of a conversation being continued, each kept ``ttl_s`` from now (written again: the same
        bytes, a new expiry), so a conversation lasts as long as it is continued, as its last turn does."""
        found: list[StoredResponse | None] = []
        for response_id in response_ids:
            raw = self.entries.get((tenant, response_id))
            if raw is not None:
                self.entries[(tenant, response_id)] = raw
            found.append(None if raw is None else _decode(raw))
        return found

    async def put(self, tenant: str, response_id: str, stored: StoredResponse) -> None:
        """Keep a turn, and its earlier turns ``ttl_s`` from now too: none expires before the turn that needs it."""
        await self.recall(tenant, stored.earlier)
        raw = bytes(memoryview(_encode(stored)))  # exact size: orjson's own buffer is larger
        if _held(raw) <= self.entries.maxsize:
            self.entries[(tenant, response_id)] = raw
        else:
            log.warning("response %s (%d bytes) is larger than responses.max_memory_mb: not stored",
                        response_id[:80], len(raw))

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self.entries.pop((tenant, response_id), None) is not None

    async def aclose(self) -> None:
        self.entries.clear()


def _held(raw: bytes) -> int:
    """The memory one stored entry takes: its bytes and their bookkeeping."""
    return len(raw) + ENTRY_OVERHEAD


class RedisResponses:
    """Stored responses in Redis, each one key with the TTL; a failed call refuses with a 503."""

    def __init__(self, settings: RedisConfig, ttl_s: float, timeout_ms: float = 1000.0) -> None:
        timeout = timeout_ms / 1000
        self.redis = Redis.from_url(settings.url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.ttl_ms = int(ttl_s * 1000)
        self.retry_s = settings.retry_s

    @staticmethod
    def key(tenant: str, response_id: str, prefix: bytes = REDIS_PREFIX) -> bytes:
        name = tenant.encode()
        return prefix + str(len(name)).encode() + b":" + name + b":" + response_id.encode()

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        try:
            raw = await self.redis.get(self.key(tenant, response_id))
            if raw is None:
                raw = await self.redis.get(self.key(tenant, response_id, OLD_REDIS_PREFIX))
        except RedisError as error:
            raise self._unavailable(error) from None
        return None if raw is None else _decode(raw)

    async def recall(self, tenant: str, response_ids: tuple[str, ...]) -> list[StoredResponse | None]:
        """Turns of a conversation being continued, in one round trip (a second for any kept in the older form), each
        kept ``ttl_s`` from now (``GETEX``): a conversation lasts as long as it is continued, as its last turn does."""
        try:
            found = await self._read(tenant, response_ids, REDIS_PREFIX)
            missing = tuple(response_id for response_id, raw in zip(response_ids, found, strict=True) if raw is None)
            if missing:
                older = iter(await self._read(tenant, missing, OLD_REDIS_PREFIX))
                found = [raw if raw is not None else next(older) for raw in found]
        except RedisError as error:
            raise self._unavailable(error) from None
        return [None if raw is None else _decode(raw) for raw in found]

    async def _read(self, tenant: str, response_ids: tuple[str, ...], prefix: bytes) -> list[bytes | None]:
        if not response_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for response_id in response_ids:
                pipe.getex(self.key(tenant, response_id, prefix), px=self.ttl_ms)
            return list(await pipe.execute())

    async def put(self, tenant: str, response_id: str, stored: StoredResponse) -> None:
        """Keep a turn, and its earlier turns ``ttl_s`` from now too (one round trip): none expires before the turn
        that needs it."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(self.key(tenant, response_id), _encode(stored), px=self.ttl_ms)
                for earlier in stored.earlier:
                    pipe.pexpire(self.key(tenant, earlier), self.ttl_ms)
                    pipe.pexpire(self.key(tenant, earlier, OLD_REDIS_PREFIX), self.ttl_ms)
                await pipe.execute()
        except RedisError as error:
            raise self._unavailable(error) from None

    async def delete(self, tenant: str, response_id: str) -> bool:
        try:
            return bool(await self.redis.delete(self.key(tenant, response_id),
                                                self.key(tenant, response_id, OLD_REDIS_PREFIX)))
        except RedisError as error:
            raise self._unavailable(error) from None

    def _unavailable(self, error: RedisError) -> Refused:
        log.warning("redis response store failed (%s)", error)
        return Refused(StateUnavailable(self.retry_s))

    async def aclose(self) -> None:
        await self.redis.aclose()


def open_response_store(settings: ResponsesConfig, redis: RedisConfig | None, clock: Clock) -> ResponseStore:
    if redis is not None:
        return RedisResponses(redis, settings.ttl_s, settings.redis_timeout_ms)
    return MemoryResponses(settings.ttl_s, int(settings.max_memory_mb * 1024 * 1024), clock)
