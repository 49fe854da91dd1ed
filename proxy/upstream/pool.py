"""What every kind of pool has (``Pool``): what the pool choice, the request's plan and the call read of it.

A kind of pool is a subclass of ``Pool`` named in ``POOL_KINDS`` with its config model (``config_model``): it
says what it runs while the gateway serves (``start``) and how it serves a request. It serves in one of two
ways: ``pick`` gives a replica, and the call exchanges the request with it over HTTP (``ReplicaPool``, kind
``openai``); or ``pick`` gives none, and the call hands the request to ``relay``, which answers it as data
(``Relayed``) that the call sends (``LitellmPool``). The call asks only that, so it needs no test of which
kind it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from policies.admission.length import PoolOption, ShortRecall, split_pays
from policies.admission.token_caps import CapAction, TokenCaps
from policies.prompt.stable_prefix import Pieces
from proxy.admission.pool_gate import PoolGate
from proxy.clock import Clock
from proxy.config.pools import BasePoolConfig
from proxy.config.upstream import Timeouts
from proxy.observability.load_metrics import LENGTH_SPLIT, QUEUED, SHORT_RECALL, LoadGauge
from proxy.transports.base import TransportFactory
from proxy.upstream.placement import NOWHERE, Explained, Picked, Placement

Usage = tuple[int | None, int | None]  # (prompt, completion) tokens, as far as they are known
Sample = tuple[LoadGauge, list[str], float]  # a load gauge, its label values, its value


class RelayedStream:
    """A stream a pool answers itself (``Pool.relay``): its SSE events as they come, each framed (``[DONE]``
    left to the call), and the usage it reported, whole once the events are read."""

    usage: Usage = (None, None)

    def __aiter__(self) -> AsyncIterator[bytes]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Relayed:
    """A pool's own answer (``Pool.relay``): a whole JSON body with its usage, or a stream."""

    body: bytes = b""
    usage: Usage = (None, None)
    stream: RelayedStream | None = None


class Pool:
    """A pool of any kind, as routing and the call see it: its name, models, length-routing option, token caps,
    queue (``gate``), overflow pool and timeouts."""

    config_model: ClassVar[type[BasePoolConfig]]  # what a pool of this kind is configured with
    counts_usage_itself: ClassVar[bool] = False  # False: vLLM streams carry usage only when asked for it
    serves_engine_apis: ClassVar[bool] = True  # vLLM serves /v1/responses and /v1/messages
    continues_answers: ClassVar[bool] = True  # vLLM writes on from a partial answer (``continue_final_message``)

    def __init__(self, config: BasePoolConfig, transports: TransportFactory, clock: Clock) -> None:
        """``transports``: where a kind that talks HTTP gets its clients (``ReplicaPool``)."""
        name = self.name = config.name
        self.clock = clock
        self.timeouts: Timeouts = config.timeouts
        self.declared_models = frozenset(config.models)
        self.discovered_models: frozenset[str] = frozenset()
        self.option = PoolOption(name, config.output, config.short_threshold, config.min_recall,
                                 config.continue_long, config.long_when_short_below, config.decided_after)
        # a short pool's: how many short answers its prediction catches
        self.recall = ShortRecall(config.short_threshold) if config.output == "short" else None
        self.priority_hints = config.priority_hints  # send vLLM's priority: the predicted output tokens
        self.max_tokens_limit, self.max_tokens_default = config.max_tokens_limit, config.max_tokens_default
        self.max_model_len = config.max_model_len  # the engines' context, as configured
        self.model_lengths: dict[str, int] = {}  # each model's context, as its engines answer (``fetch_models``)
        self.stream_keepalive = config.stream_keepalive  # seconds between SSE comments while a stream waits
        self.gate: PoolGate | None = None  # set when the pool caps its in-flight requests
        if config.max_in_flight is not None:
            self.gate = PoolGate(name, config.max_in_flight * self.width(config), config.queue_size,
                                 config.queue_timeout, clock)
        self.overflow: Pool | None = None  # where requests this pool sheds go instead
        # requests the merge placed here (pool reason ``merged``), queued or served now: raised and lowered by the
        # call; while a short pool holds any, templates decided short are placed by the merge too
        self.merged_in_flight = 0

    @staticmethod
    def width(config: Any) -> int:
        """How many times ``max_in_flight`` requests the pool takes at once: one per replica, else one."""
        return 1

    def caps(self, action: CapAction) -> TokenCaps | None:
        """This pool's max_tokens limits, applied with the tenant's action; None where it sets none."""
        if self.max_tokens_limit is None and self.max_tokens_default is None:
            return None
        return TokenCaps(self.max_tokens_limit, action, self.max_tokens_default, source=f"pool '{self.name}'")

    def context_length(self, model: str) -> int | None:
        """The most prompt and output tokens this pool's engines take for ``model``: as configured, else as
        they said; None where neither is known (no output cap is lowered to fit then)."""
        return self.max_model_len or self.model_lengths.get(model)

    @property
    def catch_all(self) -> bool:
        """A pool that declares no models and whose models are not known yet takes any model."""
        return not self.declared_models and not self.discovered_models

    def serves(self, model: str) -> bool:
        return model in self.declared_models or model in self.discovered_models

    @property
    def splits(self) -> bool:
        """A short pool: whether its split pays now (``split_pays`` of its measured recall)."""
        return self.recall is None or split_pays(self.recall.recall, self.option.min_recall)

    @property
    def load(self) -> float:
        """Requests in flight and queued, per replica; a pool without replicas counts its queue's."""
        return 0.0 if self.gate is None else float(self.gate.in_flight + self.gate.queue.size)

    def place(self, pieces: Pieces | None, body: dict[str, Any], model: str, salt: str | None,
              session: str | None = None) -> Placement:
        """What ``pick`` reads of a prompt (of the session it names, if it does); a pool without replicas places
        it nowhere."""
        return NOWHERE

    def pick(self, placement: Placement = NOWHERE) -> Picked | None:
        """The replica for a request and why; None: the pool answers it itself (``relay``)."""
        return None

    def explain(self, placement: Placement = NOWHERE) -> Explained | None:
        """What ``pick`` would choose now and why (the admin route); None where it picks no replica."""
        return None

    async def relay(self, body: bytes, *, stream: bool) -> Relayed:
        """Answer a request that ``pick`` gave no replica, as data the call sends (it writes nothing itself);
        raises ``Refused`` with the provider's failure, before the answer or while its stream is read."""
        raise NotImplementedError(f"pool '{self.name}' picks a replica for every request")

    async def start(self, timeout: float) -> list[asyncio.Task[None]]:
        """Load what the pool needs before it serves, and start what it runs meanwhile (cancelled when the
        gateway closes); ``timeout``: for each lookup it makes."""
        return []

    async def fetch_models(self, timeout: float) -> list[dict[str, Any]]:
        """The model cards of the models it serves: those it declares."""
        return [{"id": m, "object": "model", "owned_by": "prefixgate"} for m in sorted(self.declared_models)]

    async def probe(self, timeout: float) -> dict[str, bool]:
        """Each replica's base URL -> answered its health check; none without replicas."""
        return {}

    def load_samples(self, now: float) -> Iterator[Sample]:
        """Its load as ``/metrics`` shows it: the queue, and a short pool's recall and split."""
        key = [self.name]
        if self.gate is not None:
            yield QUEUED, key, self.gate.queue.size
        if self.recall is not None:
            recall = self.recall.recall
            if recall is not None:
                yield SHORT_RECALL, key, recall
            yield LENGTH_SPLIT, key, 1 if self.splits else 0

    async def aclose(self) -> None:
        return None
