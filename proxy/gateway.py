"""What one running gateway holds: built in the app lifespan, handed to routes via lifespan state."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.auth import KeyTable
from proxy.config import Config
from proxy.metrics import Metrics
from proxy.upstream import Upstreams


@dataclass(slots=True)
class Gateway:
    config: Config
    keys: KeyTable
    metrics: Metrics
    upstreams: Upstreams

    @classmethod
    async def start(cls, config: Config, metrics: Metrics) -> Gateway:
        upstreams = Upstreams(config)
        await upstreams.discover()
        return cls(config, KeyTable(config.resolved_keys), metrics, upstreams)

    async def aclose(self) -> None:
        await self.upstreams.aclose()
