"""Two-tier cache: an in-process tier in front, Redis (shared by every gateway replica) behind it.

Without Redis the in-process tier is the whole cache and keeps entries for their full TTL. With
Redis it keeps them only for a few seconds, so a hot key is read from Redis at most once per
replica per few seconds, and a Redis outage costs a miss (never an error): the gateway then skips
Redis for ``retry_s`` instead of paying a failed round trip on every request, and the entries it
made in the meantime live in the front tier for their full TTL so Qdrant and the engine are not hit
at once. Redis is aiocache's backend; the front tier is a cachetools ``TLRUCache`` (per-entry TTLs
on the gateway's clock, the least recently used dropped past ``FRONT_ENTRIES``). This module adds
the tiering and the breaker, which neither library has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlparse

import orjson
from aiocache import RedisCache
from aiocache.serializers import BaseSerializer
from cachetools import TLRUCache

from proxy.clock import Clock
from proxy.config.redis import RedisConfig
from proxy.observability.metrics import Metrics

log = logging.getLogger("prefixgate")

FRONT_ENTRIES = 50_000  # entries the in-process tier holds at most; the least recently used go first


def _expiry(key: str, entry: tuple[Any, float], now: float) -> float:
    """When a front-tier entry expires: it carries its own TTL."""
    return now + entry[1]


class _Orjson(BaseSerializer):
    """Values as orjson bytes: faster than aiocache's JsonSerializer and never decoded as text."""

    DEFAULT_ENCODING = None

    def dumps(self, value: Any) -> bytes:
        return orjson.dumps(value)

    def loads(self, value: bytes | None) -> Any:
        return None if value is None else orjson.loads(value)


def open_redis(settings: RedisConfig, namespace: str) -> RedisCache:
    """An aiocache Redis backend for ``redis[s]://[:password@]host[:port][/db]``, with socket timeouts."""
    url = urlparse(settings.url)
    timeout = settings.timeout_ms / 1000
    db = url.path.strip("/") or "0"
    return RedisCache(
        serializer=_Orjson(), namespace=namespace, endpoint=url.hostname or "127.0.0.1",
        port=url.port or 6379, db=int(db), password=unquote(url.password) if url.password else None,
        ssl=url.scheme == "rediss",
        timeout=None,  # the socket timeouts below bound each call without a wait_for task per call
        create_connection_timeout=timeout,
        connection_pool_kwargs={"socket_timeout": timeout},
    )


class TieredCache:
    """get/put JSON-able values under string keys; ``decode`` turns what Redis held back into a value."""

    def __init__(
        self, *, redis: RedisCache | None = None, front_ttl: float = 5.0, retry_s: float = 2.0,
        decode: Callable[[Any], Any] = lambda value: value,
        on_event: Callable[[str], None] | None = None, clock: Clock,
    ) -> None:
        self.front: TLRUCache[str, tuple[Any, float]] = TLRUCache(FRONT_ENTRIES, _expiry, timer=clock)
        self.redis = redis
        self.front_ttl = front_ttl
        self.retry_s = retry_s
        self.decode = decode
        self.on_event = on_event  # "shared_hit", "error": for metrics
        self._redis_down_until = 0.0
        self.clock = clock

    @property
    def shared(self) -> bool:
        return self.redis is not None

    def _redis_usable(self) -> bool:
        return self.redis is not None and self.clock() >= self._redis_down_until

    def _redis_failed(self, action: str) -> None:
        if self.clock() >= self._redis_down_until:  # once per outage, not once per call in flight
            log.warning("redis %s failed; using the in-process cache alone for %.0f s", action, self.retry_s,
                        exc_info=True)
        self._redis_down_until = self.clock() + self.retry_s
        if self.on_event is not None:
            self.on_event("error")

    async def get(self, key: str) -> Any:
        entry = self.front.get(key)
        value = None if entry is None else entry[0]
        if value is not None or not self._redis_usable():
            return value
        assert self.redis is not None
        try:
            raw = await self.redis.get(key)
        except Exception:
            self._redis_failed("read")
            return None
        if raw is None:
            return None
        value = self.decode(raw)
        self.front[key] = (value, self.front_ttl)
        if self.on_event is not None:
            self.on_event("shared_hit")
        return value

    async def put(self, key: str, value: Any, ttl: float) -> None:
        """Store for ``ttl`` seconds: in Redis, and in front for a few seconds (all of ttl when Redis is out)."""
        if not self._redis_usable():
            self.front[key] = (value, ttl)
            return
        assert self.redis is not None
        self.front[key] = (value, min(ttl, self.front_ttl))
        try:
            await self.redis.set(key, value, ttl=float(ttl))
        except Exception:
            self._redis_failed("write")
            self.front[key] = (value, ttl)

    async def clear(self) -> None:
        """The front tier only: Redis entries belong to every replica and expire by TTL."""
        self.front.clear()

    async def aclose(self) -> None:
        if self.redis is not None:
            await self.redis.client.aclose()  # aiocache 0.12's close() calls redis-py's deprecated close()


def tiered_cache(settings: RedisConfig | None, name: str, metrics: Metrics | None = None, *,
                 clock: Clock) -> TieredCache:
    """The cache called ``name`` (also its Redis key prefix): in process only, or in front of Redis."""
    on_event = (lambda event: metrics.shared_cache(name, event)) if metrics is not None else None
    if settings is None:
        return TieredCache(on_event=on_event, clock=clock)
    return TieredCache(redis=open_redis(settings, f"prefixgate:{name}"), front_ttl=settings.front_ttl_s,
                       retry_s=settings.retry_s, on_event=on_event, clock=clock)
