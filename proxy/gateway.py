"""What one running gateway holds: built in the app lifespan, handed to routes via lifespan state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import partial

from policies.request.input_limits import InputLimits
from proxy.admission.rate_limiter import open_limiter
from proxy.admission.request_admission import Admission
from proxy.admission.token_count import TokenCounter
from proxy.auth.keys import KeyTable
from proxy.auth.salt_secret import deployment_secret
from proxy.auth.tenants import TenantPolicy, tenant_policies
from proxy.caches.answers import AnswerStore
from proxy.caches.tiered import tiered_cache
from proxy.clock import Clock
from proxy.config.gateway import Config
from proxy.conversations.store import ResponseStore, open_response_store
from proxy.observability.access_log import AccessLog
from proxy.observability.metrics import Metrics
from proxy.observability.prefix_meter import PrefixMeter
from proxy.retrieval.retriever import Retriever, StoreOpener
from proxy.transports.base import TransportFactory
from proxy.upstream.load_samples import pool_load_samples
from proxy.upstream.pools import Upstreams


@dataclass(slots=True)
class Gateway:
    """What the routes reach through the app's lifespan state: config, tenants, pools and the shared parts."""

    config: Config
    keys: KeyTable
    metrics: Metrics
    upstreams: Upstreams
    tenants: dict[str, TenantPolicy]  # every tenant an API key can name, and the open-mode one
    prefix_meter: PrefixMeter
    admission: Admission
    responses: ResponseStore  # the Responses API's stored conversations (``open_response_store``)
    retriever: Retriever | None = None  # only when some tenant has retrieval on
    answers: AnswerStore | None = None  # only when some tenant stores answers
    access_log: AccessLog | None = None  # only when the config turns it on
    input_limits: InputLimits = field(default_factory=InputLimits)

    @classmethod
    async def start(cls, config: Config, metrics: Metrics, *, open_store: StoreOpener | None = None,
                    transports: TransportFactory | None = None, clock: Clock) -> Gateway:
        upstreams = Upstreams(config, transports, clock)
        metrics.attach(partial(pool_load_samples, upstreams))
        await upstreams.start()
        retriever = await Retriever.start(config, metrics, open_store, clock=clock) if config.wants_retrieval else None
        secret = await asyncio.to_thread(deployment_secret, config.resolved_salt_secret, config.data_dir)
        tenants = tenant_policies(config, secret)
        # Default labels: the tenants API keys name (in open mode, its one tenant), by name.
        named = sorted(config.reachable_tenants)
        labelled = config.metrics.tenants if config.metrics.tenants is not None else named
        metrics.label_tenants(labelled, config.metrics.max_tenants)
        wants_answers = any(t.answer_ttl for t in tenants.values())
        answers = AnswerStore(tiered_cache(config.redis, "answers", metrics, clock=clock)) if wants_answers else None
        limiter = open_limiter(config.redis, metrics.limiter_unavailable, clock)
        admission = Admission(limiter, TokenCounter(config.tokenizer), metrics, predicts=upstreams.routes_by_length,
                              on_length=upstreams.observe_length, short_threshold=upstreams.short_threshold,
                              decided_after=upstreams.decided_after)
        access_log = None
        if config.access_log.enabled:
            access_log = AccessLog(config.access_log.path, prompts=config.access_log.prompts)
            access_log.start()
        keys = KeyTable(config.resolved_keys, config.resolved_admin_key)
        responses = open_response_store(config.responses, config.redis, clock)
        return cls(config, keys, metrics, upstreams, tenants, PrefixMeter(metrics), admission, responses, retriever,
                   answers, access_log, config.server.input_limits())

    async def aclose(self) -> None:
        await self.metrics.aclose()
        await self.upstreams.aclose()
        await self.admission.aclose()
        await self.responses.aclose()
        if self.retriever is not None:
            await self.retriever.aclose()
        if self.answers is not None:
            await self.answers.aclose()
        if self.access_log is not None:
            await asyncio.to_thread(self.access_log.close)
