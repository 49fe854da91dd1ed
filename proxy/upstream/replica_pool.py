"""Pool kind ``openai`` (``ReplicaPool``): vLLM (or other OpenAI-compatible) replicas reached over HTTP; which
replica takes a request, their health.

One ``Transport`` (keep-alive connection pool) per replica, made by the gateway's transport
factory in the app lifespan. The choice itself is ``pick_replica``'s; a ``ReplicaPool`` gathers what it
reads (loads, health, the warm mask) and remembers what it chose.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import orjson

from policies.prompt.stable_prefix import Pieces
from policies.refusals import Refused, Shed, ShedReason
from policies.routing.affinity import HashRing, prefix_key, session_key
from policies.routing.health import EjectionRules, usable
from policies.routing.replica import ReplicaReason, pick_replica
from proxy.clock import Clock
from proxy.config.pools import OpenAIPoolConfig
from proxy.kv_events.routing import KvRouting
from proxy.transports.base import TransportFactory, UpstreamError
from proxy.upstream.load_samples import replica_samples
from proxy.upstream.placement import NOWHERE, Explained, Picked, Placement
from proxy.upstream.pool import Pool, Sample
from proxy.upstream.replica import Replica
from proxy.upstream.replica_load import load_polls
from proxy.upstream.warm_prefixes import WarmPrefixes

# Below uvicorn's (and so vLLM's) 5 s keep-alive, so we never reuse a socket the server is closing.
KEEPALIVE_SECONDS = 4.0


class ReplicaPool(Pool):
    """Pool kind ``openai``: requests go to one of its replicas over HTTP (``pick``), which the call's
    ``Exchange`` talks to; it checks their health, reads their engines and, with ``balance: kv_events``,
    follows what their caches hold (``start``)."""

    config_model = OpenAIPoolConfig

    def __init__(self, config: OpenAIPoolConfig, transports: TransportFactory, clock: Clock) -> None:
        super().__init__(config, transports, clock)
        headers = {"Content-Type": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self.checks = config.health
        self.engine_metrics = config.engine_metrics
        rules = EjectionRules(config.health.eject_after, config.health.backoff, config.health.max_backoff)
        self.replicas = [
            Replica(url, transports(connect_timeout=config.timeouts.connect, headers=headers,
                                    max_connections=config.max_connections, keepalive=KEEPALIVE_SECONDS),
                    config.health_path, rules, self.name, clock)
            for url in config.replicas
        ]
        self._turn = itertools.count()
        self.retries = config.retries
        self.retry_budget = config.retry_budget
        self.retrying = 0  # requests retrying, against the budget: retry_started() ... retry_ended()
        self._affine = config.balance in ("prefix", "kv_events") and len(self.replicas) > 1
        # balance kv_events: what each replica's engine holds, from its KV events
        self.kv = KvRouting(self.replicas, config.kv_events) if self._affine and config.balance == "kv_events" else None
        self._shared_load = self.kv is not None and self.kv.settings.shared_load
        self._ring = HashRing([r.base_url for r in self.replicas])
        self._load_bound = config.load_bound
        self._home_slack = config.home_slack
        warm = self._affine and config.warm_memory_s > 0
        self._warm = WarmPrefixes(config.warm_memory_s, clock=clock) if warm else None
        self._affinity_chars = config.affinity_chars

    @staticmethod
    def width(config: Any) -> int:
        return len(config.replicas)

    def affinity_key(self, pieces: Pieces, model: str, salt: str | None) -> int | None:
        """The prompt's key on this pool's ring; None where the pool does not balance by prefix."""
        return prefix_key(pieces, model, salt, self._affinity_chars) if self._affine else None

    def place(self, pieces: Pieces | None, body: dict[str, Any], model: str, salt: str | None,
              session: str | None = None) -> Placement:
        """What ``pick`` reads of a prompt (``Placement``): its key on the ring (its session's, where it names one:
        ``session_key``), and how many of its leading blocks each replica's engine holds (``balance: kv_events``)."""
        if pieces is None or not self._affine:
            key = None
        else:
            key = session_key(session, model, salt) if session is not None else self.affinity_key(pieces, model, salt)
        if key is None:
            return NOWHERE
        if self.kv is None:
            return Placement(key)
        return Placement(key, self.kv.held(body, salt), self.kv.block_size or 0, session is not None)

    def pick(self, placement: Placement = NOWHERE) -> Picked:
        """The replica for a request: the one holding most of the prompt (``placement.held``), else by its
        prefix key (``pick_replica``'s rule), else the least loaded, and why (``ReplicaReason``); raises the
        ``Shed`` refusal when no replica is healthy."""
        replicas, key = self.replicas, placement.key
        if len(replicas) == 1 and not replicas[0].health.tripped:
            return Picked(replicas[0], ReplicaReason.SINGLE, placement.held_tokens(0), self)
        warm = self._warm.mask(key) if self._warm is not None and key is not None else 0
        start = next(self._turn)  # the turn among equals: least loaded (as in ``alternate``), or equal holders
        index, reason = self._choose(key, placement.held, warm, start, placement.session)
        if self._warm is not None and key is not None:
            self._warm.remember(key, warm | 1 << index)
        return Picked(replicas[index], reason, placement.held_tokens(index), self)

    def explain(self, placement: Placement = NOWHERE) -> Explained:
        """What ``pick`` would choose now (of equal holders as busy, the first: ``pick`` takes them in turn), and what
        it read to choose it, without taking or remembering anything (the admin route ``POST /admin/route/...``);
        raises ``Shed`` as ``pick`` does."""
        now, key, held = self.clock(), placement.key, placement.held
        in_flight, healthy = self._loads(now, None, shared=held is not None and self._shared_load)
        if len(self.replicas) == 1 and not self.replicas[0].health.tripped:
            index, reason = 0, ReplicaReason.SINGLE
        else:
            warm = self._warm.mask(key) if self._warm is not None and key is not None else 0
            index, reason = self._choose(key, held, warm, 0, placement.session)
        return Explained(self.replicas[index].base_url, reason, [
            {"url": replica.base_url, "in_flight": in_flight[number], "healthy": healthy[number],
             **({"held_tokens": tokens} if (tokens := placement.held_tokens(number)) is not None else {})}
            for number, replica in enumerate(self.replicas)])

    def _choose(self, key: int | None, held: list[int] | None, warm: int, start: int,
                session: bool = False) -> tuple[int, ReplicaReason]:
        now = self.clock()
        footprint = self.kv.footprint() if held is not None and self.kv is not None else None
        loads = self._loads(now, None, shared=held is not None and self._shared_load)
        choice = pick_replica(*loads, key=key, ring=self._ring, bound=self._load_bound,
                              home_slack=self._home_slack, warm=warm, start=start, held=held, footprint=footprint,
                              held_bound=self.kv.settings.held_bound if self.kv is not None else 1.0, session=session)
        if choice is None:
            back = min(r.health.ejected_until for r in self.replicas) - now  # the first to turn half-open
            raise Refused(Shed(self.name, ShedReason.NO_HEALTHY_UPSTREAM, retry_after=back))
        return choice

    def alternate(self, failed: Replica) -> Replica | None:
        """Another usable replica for a request that ``failed`` could not take, if there is one."""
        if len(self.replicas) == 1:
            return None
        choice = pick_replica(*self._loads(self.clock(), failed), key=None, ring=self._ring,
                              bound=self._load_bound, home_slack=self._home_slack, warm=0, start=next(self._turn))
        return None if choice is None else self.replicas[choice[0]]

    def _loads(self, now: float, avoid: Replica | None, shared: bool = False) -> tuple[list[int], list[bool]]:
        """Each replica's requests in flight (this process's and, while fresh, other senders'), and
        whether it may take one (healthy, or half-open with nothing in flight; never ``avoid``).

        ``shared`` (the KV-event choice with ``kv_events.shared_load``): where other senders were seen
        lately, what each engine ran and queued at the latest reading, which every gateway takes at the same
        instants (``poll_replica``), so gateways that read the same KV events and the same counts reach the
        same choice. A gateway's own count is fresher but its own, and near a holder's allowance the
        difference flips choices; the shared count reacts to every gateway's requests one reading late, which
        is why it is not the default. A lone gateway keeps its exact count either way."""
        replicas = self.replicas
        in_flight = [r.in_flight + r.others_at(now) for r in replicas]
        if shared and any(now < r.others_seen_until for r in replicas):
            counts = [count for r in replicas if (count := r.engine_count_at(now)) is not None]
            if len(counts) == len(replicas):  # every engine read lately
                in_flight = counts
        healthy = [r is not avoid and usable(r.health, now, r.in_flight) for r in replicas]
        return in_flight, healthy

    async def fetch_models(self, timeout: float) -> list[dict[str, Any]]:
        """Model cards from every replica that answers; also refreshes the discovered set and each model's
        context (vLLM's ``max_model_len``: the shortest where replicas differ, as a request may go to any)."""
        answers = await asyncio.gather(
            *(r.transport.get(r.base_url + "/models", timeout) for r in self.replicas), return_exceptions=True
        )
        cards: dict[str, dict[str, Any]] = {}
        lengths: dict[str, int] = {}
        for answer in answers:
            if isinstance(answer, tuple) and answer[0] == 200:
                try:
                    data = orjson.loads(answer[1]).get("data", [])
                except (orjson.JSONDecodeError, AttributeError):
                    continue
                for card in data:
                    if isinstance(card, dict) and isinstance(card.get("id"), str):
                        cards.setdefault(card["id"], card)
                        length = card.get("max_model_len")
                        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
                            lengths[card["id"]] = min(length, lengths.get(card["id"], length))
        if cards:
            self.discovered_models = frozenset(cards)
            self.model_lengths = lengths
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

    @property
    def load(self) -> float:
        """Requests in flight per replica, other gateways' at the engines and this pool's queue included."""
        now = self.clock()
        queued = self.gate.queue.size if self.gate is not None else 0
        return (sum(r.in_flight + r.others_at(now) for r in self.replicas) + queued) / len(self.replicas)

    async def check_forever(self) -> None:
        """Active health checks every ``health.interval`` seconds of the pool's clock, until cancelled."""
        while True:
            await self.clock.sleep(self.checks.interval)
            await self.probe(self.checks.timeout)

    async def start(self, timeout: float) -> list[asyncio.Task[None]]:
        """Active health checks (a pool of several replicas, ``health.interval``), a reading of each engine
        (``engine_metrics.interval``) and, with ``balance: kv_events``, the engines' KV-event feeds."""
        loop = asyncio.get_running_loop()
        tasks = load_polls(self.replicas, self.engine_metrics)
        if self.checks.interval > 0 and len(self.replicas) > 1:
            tasks.append(loop.create_task(self.check_forever(), name=f"health {self.name}"))
        if self.kv is not None:
            tasks.append(loop.create_task(self.kv.run(timeout), name=f"kv events {self.name}"))
        return tasks

    def load_samples(self, now: float) -> Iterator[Sample]:
        """Each replica's load, health and engine reading, and its KV-event feed, besides the pool's queue."""
        yield from replica_samples(self, now)
        yield from super().load_samples(now)

    async def aclose(self) -> None:
        await asyncio.gather(*(r.transport.aclose() for r in self.replicas))
