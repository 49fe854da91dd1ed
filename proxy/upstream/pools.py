"""Pools of upstream replicas: which pool serves a model, which replica takes a request.

One Transport (keep-alive connection pool) per replica, created in the app lifespan.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from policies.admission import TokenCaps
from policies.affinity import HashRing, bounded_choice, prefix_key
from policies.health import HEALTHY, EjectionRules, HealthState, after_failure, after_success, usable
from policies.length import PoolOption, choose_pool
from policies.refusals import ModelNotInPool, Refused, Shed, UnknownModel, UnknownPool
from policies.replica import least_loaded
from policies.stable_prefix import Pieces
from proxy.admission.pool_gate import PoolGate
from proxy.config.gateway import Config
from proxy.config.pools import PoolConfig, Timeouts, UpstreamConfig
from proxy.transports.aiohttp_transport import AiohttpTransport
from proxy.transports.base import Transport, UpstreamError
from proxy.transports.httpx_transport import HttpxTransport
from proxy.upstream.replica_load import EngineReading, start_engine_polls
from proxy.upstream.warm_prefixes import WarmPrefixes

log = logging.getLogger("prefixgate")

TRANSPORTS: dict[str, Callable[..., Transport]] = {"aiohttp": AiohttpTransport, "httpx": HttpxTransport}

# Below uvicorn's (and so vLLM's) 5 s keep-alive, so we never reuse a socket the server is closing.
KEEPALIVE_SECONDS = 4.0


def _origin(base_url: str) -> str:
    """http://host:8000/v1 -> http://host:8000 (where vLLM serves /health and /metrics)."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


class Replica:
    __slots__ = ("base_url", "engine", "engine_up", "health", "health_url", "in_flight", "origin", "others",
                 "others_until", "pool", "rules", "taken", "transport")

    def __init__(self, base_url: str, transport: Transport, health_path: str, rules: EjectionRules,
                 pool: str = "") -> None:
        self.base_url = base_url
        self.origin = _origin(base_url)
        self.health_url = self.origin + health_path
        self.transport = transport
        self.in_flight = 0  # this process's requests
        self.taken = 0  # ... and all it has sent, so a reading can tell which of the engine's are its own
        self.engine: EngineReading | None = None  # the latest reading of the engine's /metrics
        self.engine_up = False  # the latest reading succeeded
        self.others = 0  # requests at the engine from other senders, as read ...
        self.others_until = 0.0  # ... and counted in the choice until then (monotonic clock)
        self.health: HealthState = HEALTHY
        self.rules = rules
        self.pool = pool

    def take(self) -> None:
        """A request of this process goes to this replica: the load the replica choice counts. Every
        ``take`` has one ``release``, after any retry moved the request on or when its answer ends."""
        self.in_flight += 1
        self.taken += 1

    def release(self) -> None:
        self.in_flight -= 1

    def others_at(self, now: float) -> int:
        """Other senders' requests at this engine, while the reading that found them is fresh."""
        return self.others if now < self.others_until else 0

    def succeeded(self) -> None:
        if self.health is not HEALTHY:
            if self.health.tripped:
                log.info("replica %s of pool '%s' is back", self.base_url, self.pool)
            self.health = after_success(self.health)

    def failed(self, *, at_once: bool = False) -> None:
        """A failed exchange (or, ``at_once``, a failed health check): may eject the replica."""
        before = self.health
        self.health = after_failure(before, time.monotonic(), self.rules, at_once=at_once)
        if self.health.ejected_until != before.ejected_until:
            log.warning("replica %s of pool '%s' ejected for %.0f s after %d failure(s) in a row",
                        self.base_url, self.pool, self.health.backoff, self.health.failures)


class Pool:
    def __init__(self, name: str, config: UpstreamConfig, client: str) -> None:
        headers = {"Content-Type": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self.name = name
        self.timeouts: Timeouts = config.timeouts
        self.checks = config.health
        self.engine_metrics = config.engine_metrics
        rules = EjectionRules(config.health.eject_after, config.health.backoff, config.health.max_backoff)
        self.declared_models = frozenset(config.models)
        self.discovered_models: frozenset[str] = frozenset()
        self.replicas = [
            Replica(
                url,
                TRANSPORTS[client](
                    connect_timeout=config.timeouts.connect,
                    headers=headers,
                    max_connections=config.max_connections,
                    keepalive=KEEPALIVE_SECONDS,
                ),
                config.health_path,
                rules,
                name,
            )
            for url in config.replicas
        ]
        self._turn = itertools.count()
        self.retries = config.retries
        self.retry_budget = config.retry_budget
        self.retrying = 0  # requests retrying, against the budget: retry_started() ... retry_ended()
        self._affine = config.balance == "prefix" and len(self.replicas) > 1
        self._ring = HashRing([r.base_url for r in self.replicas])
        self._load_bound = config.load_bound
        self._home_slack = config.home_slack
        self._warm = WarmPrefixes(config.warm_memory_s) if self._affine and config.warm_memory_s > 0 else None
        self._affinity_chars = config.affinity_chars
        self.option = PoolOption(name, "any", 0)
        self.max_tokens_limit: int | None = None
        self.max_tokens_default: int | None = None
        self.gate: PoolGate | None = None  # set when the pool caps its in-flight requests
        self.stream_keepalive: float | None = None  # seconds between SSE comments while a stream waits
        self.litellm: PoolConfig | None = None  # set for a pool of kind litellm: no replicas, litellm calls
        self.overflow: Pool | None = None  # where requests this pool sheds go instead
        if isinstance(config, PoolConfig):
            self.option = PoolOption(name, config.output, config.short_threshold)
            self.max_tokens_limit, self.max_tokens_default = config.max_tokens_limit, config.max_tokens_default
            self.stream_keepalive = config.stream_keepalive
            if config.kind == "litellm":
                self.litellm = config
            if config.max_in_flight is not None and config.replicas:  # litellm pools have no slots to count
                self.gate = PoolGate(name, config.max_in_flight * len(config.replicas), config.queue_size,
                                     config.queue_timeout)

    def caps(self, action: str) -> TokenCaps | None:
        """This pool's max_tokens limits, applied with the tenant's action; None where it sets none."""
        if self.max_tokens_limit is None and self.max_tokens_default is None:
            return None
        return TokenCaps(self.max_tokens_limit, action, self.max_tokens_default,  # type: ignore[arg-type]
                         source=f"pool '{self.name}'")

    @property
    def catch_all(self) -> bool:
        """A pool that declares no models and whose models are not known yet takes any model (a
        litellm pool only those it lists)."""
        return not self.declared_models and not self.discovered_models and self.litellm is None

    def serves(self, model: str) -> bool:
        return model in self.declared_models or model in self.discovered_models

    def affinity_key(self, pieces: Pieces, model: str, salt: str | None) -> int | None:
        """The prompt's key on this pool's ring; None where the pool does not balance by prefix."""
        return prefix_key(pieces, model, salt, self._affinity_chars) if self._affine else None

    def pick(self, key: int | None = None) -> tuple[Replica, str]:
        """The replica for a request, by prefix ``key`` under the load bound, else the least loaded;
        and why: single (the pool's one replica), home (the key's own), warm (another replica that
        served the prefix lately: less loaded than the home, or the home was over the bound or
        ejected), spilled (the home was over the bound or ejected, and this replica had not served
        the prefix) or least_loaded (no key)."""
        replicas = self.replicas
        if len(replicas) == 1 and not replicas[0].health.tripped:
            return replicas[0], "single"
        warm = self._warm.mask(key) if self._warm is not None and key is not None else 0
        index = self._choose(key, None, warm)
        if index is None:
            back = min(r.health.ejected_until for r in replicas) - time.monotonic()  # first to turn half-open
            raise Refused(Shed(self.name, "no_healthy_upstream", retry_after=back))
        if key is None:
            return replicas[index], "least_loaded"
        if self._warm is not None:
            self._warm.remember(key, warm | 1 << index)
        if index == self._ring.home(key):
            return replicas[index], "home"
        return replicas[index], "warm" if warm >> index & 1 else "spilled"

    def alternate(self, failed: Replica) -> Replica | None:
        """Another usable replica for a request that ``failed`` could not take, if there is one."""
        if len(self.replicas) == 1:
            return None
        index = self._choose(None, failed)
        return None if index is None else self.replicas[index]

    def _choose(self, key: int | None, avoid: Replica | None, warm: int = 0) -> int | None:
        replicas = self.replicas
        now = time.monotonic()
        in_flight = [r.in_flight + r.others_at(now) for r in replicas]
        healthy = [r is not avoid and usable(r.health, now, r.in_flight) for r in replicas]
        if key is None:
            return least_loaded(in_flight, healthy, next(self._turn))
        return bounded_choice(self._ring, key, in_flight, healthy, self._load_bound, self._home_slack, warm)

    async def fetch_models(self, timeout: float) -> list[dict[str, Any]]:
        """Model cards from every replica that answers; also refreshes the discovered set."""
        answers = await asyncio.gather(
            *(r.transport.get(r.base_url + "/models", timeout) for r in self.replicas), return_exceptions=True
        )
        cards: dict[str, dict[str, Any]] = {}
        for answer in answers:
            if isinstance(answer, tuple) and answer[0] == 200:
                try:
                    data = orjson.loads(answer[1]).get("data", [])
                except (orjson.JSONDecodeError, AttributeError):
                    continue
                for card in data:
                    if isinstance(card, dict) and isinstance(card.get("id"), str):
                        cards.setdefault(card["id"], card)
        if cards:
            self.discovered_models = frozenset(cards)
        if self.declared_models:
            return [cards.get(m) or {"id": m, "object": "model", "owned_by": "prefixgate"}
                    for m in sorted(self.declared_models)]
        return list(cards.values())

    async def probe(self, timeout: float) -> dict[str, bool]:
        """GET each replica's health URL: base URL -> answered 200. A failed check ejects the replica,
        a passed one brings it back."""

        async def one(replica: Replica) -> bool:
            try:
                status, _ = await replica.transport.get(replica.health_url, timeout)
            except UpstreamError:
                status = 0
            if status == 200:
                replica.succeeded()
                return True
            replica.failed(at_once=True)
            return False

        results = await asyncio.gather(*(one(r) for r in self.replicas))
        return {r.base_url: ok for r, ok in zip(self.replicas, results, strict=True)}

    def retry_started(self) -> None:
        """A request moves to its first retry; it counts against ``retry_budget`` until ``retry_ended``."""
        self.retrying += 1

    def retry_ended(self) -> None:
        self.retrying -= 1

    def in_flight(self) -> int:
        return sum(r.in_flight for r in self.replicas)

    async def check_forever(self) -> None:
        """Active health checks every ``health.interval`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(self.checks.interval)
            await self.probe(self.checks.timeout)

    async def aclose(self) -> None:
        await asyncio.gather(*(r.transport.aclose() for r in self.replicas))


class Upstreams:
    """All pools of a running gateway, plus the optional embeddings upstream."""

    def __init__(self, config: Config) -> None:
        client = config.server.http_client
        self.pools = [Pool(p.name, p, client) for p in config.pools]
        self.embeddings = Pool("embeddings", config.embeddings, client) if config.embeddings else None
        self._lookup_timeout = config.server.ready_timeout
        self._checks: list[asyncio.Task[None]] = []
        self.by_name = {pool.name: pool for pool in self.pools}
        for pool_config in config.pools:
            if pool_config.overflow_to is not None:
                self.by_name[pool_config.name].overflow = self.by_name[pool_config.overflow_to]
        self.routes_by_length = any(pool.option.kind == "short" for pool in self.pools)

    def start_checks(self) -> None:
        """Active health checks for the pools of several replicas that ask for them; engine readings."""
        self._checks = [asyncio.get_running_loop().create_task(pool.check_forever(), name=f"health {pool.name}")
                        for pool in self.pools if pool.checks.interval > 0 and len(pool.replicas) > 1]
        self._checks += start_engine_polls(self.all_pools())

    def all_pools(self) -> Iterable[Pool]:
        yield from self.pools
        if self.embeddings is not None:
            yield self.embeddings

    def pool_for(self, model: str, *, embeddings: bool = False, predicted_p90: int | None = None,
                 named: str | None = None) -> tuple[Pool, str]:
        """The pool for a model and why: the one ``named`` (x-prefixgate-pool), else by predicted
        ``length`` among those that serve it, else the first that serves the ``model`` or takes any."""
        if embeddings and self.embeddings is not None:
            if self.embeddings.serves(model) or self.embeddings.catch_all:
                return self.embeddings, "model"
        if named is not None:
            return self._named(named, model), "named"
        if predicted_p90 is not None and self.routes_by_length:
            serving = [pool for pool in self.pools if pool.serves(model)] or [p for p in self.pools if p.catch_all]
            if serving:
                return self.by_name[choose_pool([pool.option for pool in serving], predicted_p90).name], "length"
        for pool in self.pools:  # the common case: no list built per request
            if pool.serves(model):
                return pool, "model"
        for pool in self.pools:
            if pool.catch_all:
                return pool, "model"
        raise Refused(UnknownModel(model))

    def _named(self, name: str, model: str) -> Pool:
        pool = self.by_name.get(name)
        if pool is None:
            raise Refused(UnknownPool(name, tuple(self.by_name)))
        if not (pool.serves(model) or pool.catch_all):
            raise Refused(ModelNotInPool(name, model))
        return pool

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
        for task in self._checks:
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        await asyncio.gather(*(p.aclose() for p in self.all_pools()))

