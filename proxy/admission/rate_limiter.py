"""Where tenant rate-limit windows live: this process's memory, or Redis shared by every gateway.

In memory the check and the update run with no await between them, so the event loop makes them
atomic. In Redis one Lua script (limiter.lua) does both on Redis's clock, so any number of gateway
processes enforce one limit exactly. If Redis fails, the gateway stops asking it for ``retry_s``
(the breaker is the same as the shared caches') and meanwhile, as ``limits_when_down`` says, either
keeps its own windows (limits hold per process; traffic neither stops nor stalls) or refuses every
limited request with a 503, for operators to whom a limit exceeded costs more than an outage.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from policies.admission.limits import WINDOW_SECONDS, Entry, RateLimits, SlidingWindow, Verdict
from proxy.clock import Clock
from proxy.config.redis import RedisConfig
from proxy.micro_batch import MicroBatcher

log = logging.getLogger("prefixgate")

_SCRIPT = (Path(__file__).with_name("rate_limiter.lua")).read_text()


@dataclass(slots=True)
class Ticket:
    """An admitted request's place in its tenant's window, for settling its tokens later."""

    tenant: str
    entry: Entry | None = None  # in memory
    entry_id: str | None = None  # in Redis


class LimiterUnavailable(Exception):
    """Redis cannot check the limits, and the configuration says to refuse rather than guess."""

    def __init__(self, retry_after: float) -> None:
        super().__init__("rate limiter unavailable")
        self.retry_after = retry_after


class MemoryLimiter:
    """Windows in this process: the single-replica default."""

    def __init__(self, clock: Clock) -> None:
        self.windows: dict[str, SlidingWindow] = {}
        self.clock = clock

    async def admit(self, tenant: str, limits: RateLimits, tokens: int) -> tuple[Verdict, Ticket | None]:
        window = self.windows.get(tenant)
        if window is None:
            window = self.windows[tenant] = SlidingWindow()
        verdict, entry = window.admit(self.clock(), tokens, limits)
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


class _ScriptPipeline:
    """Script calls made while a pipeline is in flight go to Redis together in the next one (a
    ``MicroBatcher`` in front of this): a burst of requests costs a few round trips on one connection
    instead of one round trip and one connection each (Redis refuses connections past its client
    limit; waiting for a free one stalls the burst). Redis runs the scripts one after another, each
    atomic, as before."""

    def __init__(self, redis: Redis, script: Any) -> None:
        self.redis = redis
        self.script = script

    async def __call__(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                await self.script(keys=keys, args=args, client=pipe)
            return await pipe.execute(raise_on_error=False)  # a failed script: its exception in its place


class RedisLimiter:
    """Windows in Redis, one set of keys per tenant (hash-tagged, so a Redis Cluster keeps them together)."""

    def __init__(self, settings: RedisConfig, unavailable: Callable[[str], None] = lambda action: None,
                 prefix: str = "prefixgate:limits", *, clock: Clock) -> None:
        timeout = settings.timeout_ms / 1000
        self.redis = Redis.from_url(settings.url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.calls = MicroBatcher(_ScriptPipeline(self.redis, self.redis.register_script(_SCRIPT)), max_batch=512)
        self.prefix = prefix
        self.retry_s = settings.retry_s
        self.refuses = settings.limits_when_down == "refuse"
        self.unavailable = unavailable  # told "local" or "refused" for each request decided without Redis
        self.clock = clock
        self.local = MemoryLimiter(clock)  # while Redis is down
        self._down_until = 0.0

    def _keys(self, tenant: str) -> list[str]:
        base = f"{self.prefix}:{{{tenant}}}"
        return [base + ":entries", base + ":tokens", base + ":total"]

    def _failed(self, error: Exception) -> None:
        if self.clock() >= self._down_until:
            meanwhile = "limited requests are refused" if self.refuses else "limits hold per process"
            log.warning("redis rate limiter failed (%s); %s for %.0f s", error, meanwhile, self.retry_s)
        self._down_until = self.clock() + self.retry_s

    async def _without_redis(self, tenant: str, limits: RateLimits, tokens: int) -> tuple[Verdict, Ticket | None]:
        if self.refuses:
            self.unavailable("refused")
            raise LimiterUnavailable(max(0.0, self._down_until - self.clock()))
        self.unavailable("local")
        return await self.local.admit(tenant, limits, tokens)

    async def admit(self, tenant: str, limits: RateLimits, tokens: int) -> tuple[Verdict, Ticket | None]:
        if self.clock() < self._down_until:
            return await self._without_redis(tenant, limits, tokens)
        entry_id = os.urandom(8).hex()
        args = ["admit", _or_off(limits.requests_per_minute), _or_off(limits.tokens_per_minute), tokens, entry_id,
                WINDOW_SECONDS]
        try:
            verdict = _verdict(await self.calls.submit((self._keys(tenant), args)))
        except (RedisError, OSError) as error:
            self._failed(error)
            return await self._without_redis(tenant, limits, tokens)
        return verdict, Ticket(tenant, entry_id=entry_id) if verdict.admitted else None

    async def settle(self, ticket: Ticket, tokens: int) -> None:
        if ticket.entry is not None:
            await self.local.settle(ticket, tokens)
            return
        try:
            await self.calls.submit((self._keys(ticket.tenant), ["settle", ticket.entry_id, tokens, WINDOW_SECONDS]))
        except (RedisError, OSError) as error:
            self._failed(error)

    async def aclose(self) -> None:
        await self.redis.aclose()


def _or_off(limit: int | None) -> int:
    return -1 if limit is None else limit


Limiter = MemoryLimiter | RedisLimiter


def open_limiter(redis: RedisConfig | None, unavailable: Callable[[str], None], clock: Clock) -> Limiter:
    return RedisLimiter(redis, unavailable, clock=clock) if redis is not None else MemoryLimiter(clock)
