"""Where tenant rate-limit windows live: this process's memory, or Redis shared by every gateway.

In memory the check and the update run with no await between them, so the event loop makes them
atomic. In Redis one Lua script (limiter.lua) does both on Redis's clock, so any number of gateway
processes enforce one limit exactly. If Redis fails, the gateway falls back to its own windows for
``retry_s`` (limits then hold per process) rather than refusing or stalling traffic; the breaker is
the same as the shared caches'.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from time import monotonic
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from policies.limits import WINDOW_SECONDS, Entry, RateLimits, SlidingWindow, Verdict
from proxy.retrieval_config import RedisConfig

log = logging.getLogger("prefixgate")

_SCRIPT = (Path(__file__).with_name("limiter.lua")).read_text()


@dataclass(slots=True)
class Ticket:
    """An admitted request's place in its tenant's window, for settling its tokens later."""

    tenant: str
    entry: Entry | None = None  # in memory
    entry_id: str | None = None  # in Redis


class MemoryLimiter:
    """Windows in this process: the single-replica default."""

    def __init__(self) -> None:
        self.windows: dict[str, SlidingWindow] = {}

    async def admit(self, tenant: str, limits: RateLimits, tokens: int) -> tuple[Verdict, Ticket | None]:
        window = self.windows.get(tenant)
        if window is None:
            window = self.windows[tenant] = SlidingWindow()
        verdict, entry = window.admit(monotonic(), tokens, limits)
        return verdict, None if entry is None else Ticket(tenant, entry=entry)

    async def settle(self, ticket: Ticket, tokens: int) -> None:
        window = self.windows.get(ticket.tenant)
        if window is not None and ticket.entry is not None:
            window.settle(ticket.entry, tokens)

    async def aclose(self) -> None:
        pass


def _verdict(reply: list[Any]) -> Verdict:
    admitted, requests, tokens, reset_requests_ms, reset_tokens_ms, too_large = (int(v) for v in reply)
    return Verdict(bool(admitted), None if requests < 0 else requests, None if tokens < 0 else tokens,
                   reset_requests_ms / 1000, reset_tokens_ms / 1000, bool(too_large))


class RedisLimiter:
    """Windows in Redis, one set of keys per tenant (hash-tagged, so a Redis Cluster keeps them together)."""

    def __init__(self, settings: RedisConfig, prefix: str = "prefixgate:limits") -> None:
        timeout = settings.timeout_ms / 1000
        self.redis = Redis.from_url(settings.url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.script = self.redis.register_script(_SCRIPT)
        self.prefix = prefix
        self.retry_s = settings.retry_s
        self.local = MemoryLimiter()  # while Redis is down
        self._down_until = 0.0

    def _keys(self, tenant: str) -> list[str]:
        base = f"{self.prefix}:{{{tenant}}}"
        return [base + ":entries", base + ":tokens", base + ":total"]

    def _failed(self, error: Exception) -> None:
        if monotonic() >= self._down_until:
            log.warning("redis rate limiter failed (%s); limits hold per process for %.0f s", error, self.retry_s)
        self._down_until = monotonic() + self.retry_s

    async def admit(self, tenant: str, limits: RateLimits, tokens: int) -> tuple[Verdict, Ticket | None]:
        if monotonic() < self._down_until:
            return await self.local.admit(tenant, limits, tokens)
        entry_id = os.urandom(8).hex()
        args = ["admit", _or_off(limits.requests_per_minute), _or_off(limits.tokens_per_minute), tokens, entry_id,
                WINDOW_SECONDS]
        try:
            verdict = _verdict(await self.script(keys=self._keys(tenant), args=args))
        except (RedisError, OSError) as error:
            self._failed(error)
            return await self.local.admit(tenant, limits, tokens)
        return verdict, Ticket(tenant, entry_id=entry_id) if verdict.admitted else None

    async def settle(self, ticket: Ticket, tokens: int) -> None:
        if ticket.entry is not None:
            await self.local.settle(ticket, tokens)
            return
        try:
            await self.script(keys=self._keys(ticket.tenant), args=["settle", ticket.entry_id, tokens, WINDOW_SECONDS])
        except (RedisError, OSError) as error:
            self._failed(error)

    async def aclose(self) -> None:
        await self.redis.aclose()


def _or_off(limit: int | None) -> int:
    return -1 if limit is None else limit


Limiter = MemoryLimiter | RedisLimiter


def open_limiter(redis: RedisConfig | None) -> Limiter:
    return RedisLimiter(redis) if redis is not None else MemoryLimiter()
