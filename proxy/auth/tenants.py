"""Each tenant's policy: everything decided per tenant once at start-up, looked up once per request.

Built from the config for every tenant an API key can name (and the open-mode one): the prompt
rewrite, the cache salt, admission's caps and limits, retrieval and the answer cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.admission.limits import RateLimits
from policies.admission.token_caps import TokenCaps
from policies.prompt.cache_salt import SaltPolicy, salt_policy
from policies.prompt.lines import LineScanner
from policies.prompt.prompt import PromptPolicy
from policies.prompt.templates import compile_template
from policies.prompt.volatile import custom_detectors
from proxy.admission.request_admission import TenantAdmission
from proxy.config.gateway import OPEN_TENANT, Config, LimitsConfig
from proxy.config.prompt import PromptConfig
from proxy.config.retrieval import TenantRetrieval


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """Everything decided per tenant once at start-up, looked up once per request."""

    name: str
    prompt: PromptPolicy
    salt: SaltPolicy
    admission: TenantAdmission
    retrieval: TenantRetrieval | None = None  # set when this tenant gets context from its documents
    answer_ttl: float | None = None  # set when this tenant's deterministic answers are stored for repeats


def tenant_policies(config: Config, salt_secret: bytes, extra: tuple[str, ...] = ()) -> dict[str, TenantPolicy]:
    """One policy per named tenant; tenants with the same patterns share one line cache."""
    scanners: dict[tuple[tuple[str, str], ...], LineScanner] = {}

    def build(prompt: PromptConfig, tenant: str) -> TenantPolicy:
        patterns = tuple((pattern.name, pattern.regex) for pattern in prompt.patterns)
        scanner = scanners.get(patterns)
        if scanner is None:
            scanner = scanners[patterns] = LineScanner(custom_detectors(patterns))
        policy = PromptPolicy(volatile=prompt.volatile, actions=prompt.actions, scope=prompt.scope, note=prompt.note,
                              canonical=prompt.canonical, sort_tools=prompt.sort_tools, scanner=scanner,
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
