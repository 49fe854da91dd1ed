"""Configuration of the Redis that gateway replicas share (``redis``): the rate limits' windows, and the
shared tier of the answer and passage caches.

Part of the one frozen ``Config``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from proxy.config.frozen import Frozen as _Frozen


class RedisConfig(_Frozen):
    """Redis shared by every gateway replica; caches keep a short in-process tier in front of it."""

    url: str = Field(min_length=1, repr=False)
    """`redis://[:password@]host[:port][/db]`, `rediss://` for TLS"""
    timeout_ms: float = Field(100.0, gt=0)
    """each Redis call; past it the cache counts a miss"""
    front_ttl_s: float = Field(5.0, gt=0)
    """in-process tier in front of Redis: how long a replica reuses what it read or wrote"""
    retry_s: float = Field(2.0, gt=0)
    """after a failed call, use the in-process tier alone for this long"""
    limits_when_down: Literal["local", "refuse"] = "local"
    """rate limits while Redis cannot be reached: `local` keeps them per process (each replica then
    admits up to the whole limit), `refuse` answers 503 with Retry-After until Redis is back"""

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: str) -> str:
        if not url.startswith(("redis://", "rediss://")):
            # the URL itself stays out of the message: it may hold a password
            raise ValueError("must be a redis:// URL (rediss:// for TLS) such as redis://127.0.0.1:6379/0")
        return url
