"""What one running gateway holds: built in the app lifespan, handed to routes via lifespan state."""

from __future__ import annotations

from dataclasses import dataclass

from policies.lines import LineScanner
from policies.prompt import PromptPolicy
from policies.volatile import custom_detectors
from proxy.auth import KeyTable
from proxy.config import Config, PromptConfig
from proxy.metrics import Metrics
from proxy.upstream import Upstreams


@dataclass(slots=True)
class Gateway:
    config: Config
    keys: KeyTable
    metrics: Metrics
    upstreams: Upstreams
    prompt_policy: PromptPolicy

    @classmethod
    async def start(cls, config: Config, metrics: Metrics) -> Gateway:
        upstreams = Upstreams(config)
        await upstreams.discover()
        return cls(config, KeyTable(config.resolved_keys), metrics, upstreams, prompt_policy(config.prompt))

    async def aclose(self) -> None:
        await self.upstreams.aclose()


def prompt_policy(config: PromptConfig) -> PromptPolicy:
    return PromptPolicy(
        volatile=config.volatile, scope=config.scope, note=config.note, canonical=config.canonical,
        scanner=LineScanner(custom_detectors([(pattern.name, pattern.regex) for pattern in config.patterns])),
    )
