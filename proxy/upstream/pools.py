"""All pools of a running gateway: the kinds of pool, which pool serves a request, discovery and readiness.

Pools are built by kind from ``POOL_KINDS`` (the config's ``kind``: each kind's class, which names its config
model), and each starts what it runs (``Pool.start``); the choice among them is ``choose_pool``'s. Every
pool's transports come from one factory and read one clock, both handed to ``create_app`` (tests give
in-memory transports and a clock they move).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from policies.admission.length import Side
from policies.refusals import Refused
from policies.routing.pool_choice import PoolReason, choose_pool, long_pool
from proxy.clock import Clock
from proxy.config.gateway import Config
from proxy.config.pools import OpenAIPoolConfig
from proxy.transports.base import TransportFactory
from proxy.transports.clients import CLIENTS
from proxy.upstream.litellm_pool import LitellmPool
from proxy.upstream.pool import Pool
from proxy.upstream.replica_pool import ReplicaPool

POOL_KINDS: dict[str, type[Pool]] = {"openai": ReplicaPool, "litellm": LitellmPool}
"""Each kind of pool (``PoolConfig``'s ``kind``) and its class; the class names its config model."""


class Upstreams:
    """All pools of a running gateway, plus the optional embeddings upstream."""

    def __init__(self, config: Config, transports: TransportFactory | None, clock: Clock) -> None:
        """``transports``: None for the clients ``server.http_client`` names."""
        transports = transports or CLIENTS[config.server.http_client]
        self.clock = clock
        self.pools = [POOL_KINDS[p.kind](p, transports, clock) for p in config.pools]
        self.embeddings = None if config.embeddings is None else ReplicaPool(
            OpenAIPoolConfig(name="embeddings", **dict(config.embeddings)), transports, clock)
        self._lookup_timeout = config.server.ready_timeout
        self._tasks: list[asyncio.Task[None]] = []
        self.by_name = {pool.name: pool for pool in self.pools}
        for pool_config in config.pools:
            if pool_config.overflow_to is not None:
                self.by_name[pool_config.name].overflow = self.by_name[pool_config.overflow_to]
        self.routes_by_length = any(pool.option.kind == "short" for pool in self.pools)
        self.short_pools = [pool for pool in self.pools if pool.recall is not None]
        self.continues = any(pool.option.continue_long for pool in self.short_pools)  # some answers may be cut
        # what a prediction's short share is measured against: the smallest short threshold
        self.short_threshold = min((pool.option.short_threshold for pool in self.short_pools), default=None)
        # after how many answers a template's own place it: that same short pool's ``decided_after``
        narrowest = min(self.short_pools, key=lambda pool: pool.option.short_threshold, default=None)
        self.decided_after = narrowest.option.decided_after if narrowest is not None else 0

    async def start(self) -> None:
        """What each pool loads and runs while the gateway serves (``Pool.start``), then what the pools that
        declare no models serve (``discover``)."""
        for pool in self.all_pools():
            self._tasks += await pool.start(self._lookup_timeout)
        await self.discover()

    def all_pools(self) -> Iterable[Pool]:
        yield from self.pools
        if self.embeddings is not None:
            yield self.embeddings

    def pool_for(self, model: str, *, embeddings: bool = False, predicted_p90: int | None = None,
                 named: str | None = None, short_share: float | None = None,
                 continuable: bool = False, decided: Side | None = None) -> tuple[Pool, PoolReason]:
        """The pool for a request and why (``choose_pool``); raises the refusal when none serves it."""
        choice = choose_pool(self.pools, model, by_name=self.by_name,
                             embeddings=self.embeddings if embeddings else None, named=named,
                             predicted_p90=predicted_p90, routes_by_length=self.routes_by_length,
                             short_share=short_share, continuable=continuable, decided=decided)
        if not isinstance(choice, tuple):
            raise Refused(choice)
        return choice

    def continues_in(self, short: Pool, model: str) -> Pool | None:
        """The pool where ``short``'s cut answers to ``model`` go on, if it continues them."""
        if short.option.kind != "short" or not short.option.continue_long:
            return None
        serving = [pool for pool in self.pools if pool.serves(model)] or [p for p in self.pools if p.catch_all]
        return long_pool(serving, short)

    def observe_length(self, model: str, predicted_p90: int, actual: int, may_cut: bool = False) -> None:
        """An answer ended: the short pools that serve its model learn whether its prediction caught it. A
        pool that continues answers learns it only of those it may not cut: only they go by the split."""
        for pool in self.short_pools:
            if may_cut and pool.option.continue_long:
                continue
            if pool.recall is not None and (pool.serves(model) or pool.catch_all):
                pool.recall.observe(predicted_p90, actual)

    async def discover(self) -> None:
        """Learn what pools without declared models serve; a pool that does not answer stays catch-all."""
        await asyncio.gather(
            *(p.fetch_models(self._lookup_timeout) for p in self.all_pools() if not p.declared_models),
            return_exceptions=True,
        )

    async def list_models(self) -> list[dict[str, Any]]:
        lists = await asyncio.gather(*(p.fetch_models(self._lookup_timeout) for p in self.all_pools()))
        seen: dict[str, dict[str, Any]] = {}
        for cards in lists:
            for card in cards:
                seen.setdefault(card["id"], card)
        return list(seen.values())

    async def readiness(self) -> dict[str, bool]:
        maps = await asyncio.gather(*(p.probe(self._lookup_timeout) for p in self.pools))
        return {url: ok for m in maps for url, ok in m.items()}

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(p.aclose() for p in self.all_pools()))

