"""What one running gateway holds: built in the app lifespan, handed to routes via lifespan state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from policies.cache_salt import SaltPolicy, salt_policy
from policies.input_limits import InputLimits
from policies.limits import RateLimits
from policies.lines import LineScanner
from policies.prompt import PromptPolicy
from policies.templates import compile_template
from policies.token_caps import TokenCaps
from policies.volatile import custom_detectors
from proxy.admission.rate_limiter import open_limiter
from proxy.admission.request_admission import Admission, TenantAdmission
from proxy.admission.token_count import TokenCounter
from proxy.auth.keys import OPEN_TENANT, KeyTable
from proxy.auth.salt_secret import deployment_secret
from proxy.caches.answers import AnswerStore
from proxy.caches.tiered import tiered_cache
from proxy.clock import SYSTEM_CLOCK, Clock
from proxy.config.gateway import Config, LimitsConfig
from proxy.config.prompt import PromptConfig
from proxy.config.retrieval import TenantRetrieval
from proxy.observability.access_log import AccessLog
from proxy.observability.metrics import Metrics
from proxy.observability.prefix_meter import PrefixMeter
from proxy.retrieval.retriever import Retriever, StoreOpener
from proxy.transports.base import TransportFactory
from proxy.upstream.litellm_pool import load_litellm
from proxy.upstream.pools import Upstreams


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """Everything decided per tenant once at start-up, looked up once per request."""

    name: str
    prompt: PromptPolicy
    salt: SaltPolicy
    admission: TenantAdmission
    retrieval: TenantRetrieval | None = None  # set when this tenant gets context from its documents
    answer_ttl: float | None = None  # set when this tenant's deterministic answers are stored for repeats


@dataclass(slots=True)
class Gateway:
    config: Config
    keys: KeyTable
    metrics: Metrics
    upstreams: Upstreams
    tenants: dict[str, TenantPolicy]  # every tenant an API key can name, and the open-mode one
    prefix_meter: PrefixMeter
    admission: Admission
    retriever: Retriever | None = None  # only when some tenant has retrieval on
    answers: AnswerStore | None = None  # only when some tenant stores answers
    access_log: AccessLog | None = None  # only when the config turns it on
    input_limits: InputLimits = field(default_factory=InputLimits)

    @classmethod
    async def start(cls, config: Config, metrics: Metrics, *, open_store: StoreOpener | None = None,
                    transports: TransportFactory | None = None, clock: Clock = SYSTEM_CLOCK) -> Gateway:
        upstreams = Upstreams(config, transports, clock)
        metrics.attach(upstreams)
        if any(pool.kind == "litellm" for pool in config.pools):
            await asyncio.to_thread(load_litellm)  # about a second of imports, off the event loop
        await upstreams.discover()
        upstreams.start_checks()
        retriever = await Retriever.start(config, metrics, open_store, clock) if config.wants_retrieval else None
        secret = await asyncio.to_thread(deployment_secret, config.resolved_salt_secret, config.data_dir)
        tenants = tenant_policies(config, secret)
        # Default labels: the tenants API keys name (in open mode, its one tenant), by name.
        named = sorted(config.reachable_tenants)
        labelled = config.metrics.tenants if config.metrics.tenants is not None else named
        metrics.label_tenants(labelled, config.metrics.max_tenants)
        wants_answers = any(t.answer_ttl for t in tenants.values())
        answers = AnswerStore(tiered_cache(config.redis, "answers", metrics, clock)) if wants_answers else None
        limiter = open_limiter(config.redis, metrics.limiter_unavailable, clock)
        admission = Admission(limiter, TokenCounter(config.tokenizer), metrics, predicts=upstreams.routes_by_length)
        access_log = None
        if config.access_log.enabled:
            access_log = AccessLog(config.access_log.path, prompts=config.access_log.prompts)
            access_log.start()
        keys = KeyTable(config.resolved_keys, config.resolved_admin_key)
        return cls(config, keys, metrics, upstreams, tenants, PrefixMeter(metrics), admission, retriever, answers,
                   access_log, config.server.input_limits())

    async def aclose(self) -> None:
        await self.metrics.aclose()
        await self.upstreams.aclose()
        await self.admission.aclose()
        if self.retriever is not None:
            await self.retriever.aclose()
        if self.answers is not None:
            await self.answers.aclose()
        if self.access_log is not None:
            await asyncio.to_thread(self.access_log.close)


def tenant_policies(config: Config, salt_secret: bytes, extra: tuple[str, ...] = ()) -> dict[str, TenantPolicy]:
    """One policy per named tenant; tenants with the same patterns share one line cache."""
    scanners: dict[tuple[tuple[str, str], ...], LineScanner] = {}

    def build(prompt: PromptConfig, tenant: str) -> TenantPolicy:
        patterns = tuple((pattern.name, pattern.regex) for pattern in prompt.patterns)
        scanner = scanners.get(patterns)
        if scanner is None:
            scanner = scanners[patterns] = LineScanner(custom_detectors(patterns))
        policy = PromptPolicy(volatile=prompt.volatile, actions=prompt.actions, scope=prompt.scope, note=prompt.note,
                              canonical=prompt.canonical, scanner=scanner,
                              templates=tuple(compile_template(t.name, t.text) for t in prompt.templates))
        own = config.tenants.get(tenant)
        retrieval = own.retrieval if own is not None and own.retrieval is not None and own.retrieval.enabled else None
        answer_ttl = own.answer_cache.ttl_s if own is not None and own.answer_cache is not None else None
        return TenantPolicy(tenant, policy, salt_policy(prompt.cache_salt, salt_secret, tenant), tenant_admission(
            config.tenant_limits(tenant)), retrieval, answer_ttl)

    names = {*config.resolved_keys.values(), *config.tenants, OPEN_TENANT, *extra}
    return {name: build(config.tenant_prompt(name), name) for name in names}


def tenant_admission(limits: LimitsConfig) -> TenantAdmission:
    return TenantAdmission(
        RateLimits(limits.requests_per_minute, limits.tokens_per_minute),
        TokenCaps(limits.max_tokens, limits.max_tokens_action, limits.default_max_tokens, limits.max_input_tokens),
        limits.output_reservation,
    )
