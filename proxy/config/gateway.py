"""The one frozen configuration object (``Config``) and its sections, each validated on load.

``load_config`` and ``build_config`` make it from YAML and the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from proxy.config.auth import AuthConfig
from proxy.config.frozen import Frozen as _Frozen
from proxy.config.pools import PoolConfig
from proxy.config.prompt import PromptConfig, span_kinds
from proxy.config.redis import RedisConfig
from proxy.config.responses import ResponsesConfig
from proxy.config.retrieval import AnswerCacheConfig, RetrievalConfig, TenantRetrieval
from proxy.config.server import AccessLogConfig, EngineConfig, MetricsConfig, ServerConfig
from proxy.config.upstream import UpstreamConfig

OPEN_TENANT = "default"  # the tenant of every request while no API keys are configured

class LimitsConfig(_Frozen):
    """Admission per tenant (see docs/configuration.md, section limits). None: no limit."""

    requests_per_minute: int | None = Field(None, ge=1)
    """requests a tenant may send in any rolling minute"""
    tokens_per_minute: int | None = Field(None, ge=1)
    """prompt tokens plus reserved output a tenant may send in any rolling minute; the reservation is settled with the
    usage the upstream reports"""
    max_tokens: int | None = Field(None, ge=1)
    """most output tokens a request may ask for (`max_tokens` or `max_completion_tokens`)"""
    max_tokens_action: Literal["clamp", "reject"] = "clamp"
    """a request above `max_tokens`: `clamp` it to the limit, or `reject` it with a 400 that names the field and the
    limit"""
    default_max_tokens: int | None = Field(None, ge=1)
    """`max_tokens` given to requests that name none"""
    max_input_tokens: int | None = Field(None, ge=1)
    """longest prompt, counted as it will be sent (rewritten, with retrieved context); longer ones get 400"""
    output_reservation: int = Field(256, ge=0)
    """output tokens held against `tokens_per_minute` for a request with neither `max_tokens` nor a length prediction"""


class TenantConfig(_Frozen):
    """Per-tenant settings. ``prompt`` and ``limits`` fields here replace the top-level ones."""

    prompt: PromptConfig = PromptConfig()
    """this tenant's `prompt` fields; they replace the top-level ones of the same name"""
    limits: LimitsConfig = LimitsConfig()
    """this tenant's `limits` fields; they replace the top-level ones of the same name"""
    retrieval: TenantRetrieval | None = None
    """context from the tenant's own documents (see below); none: no retrieval"""
    answer_cache: AnswerCacheConfig | None = None
    """exact deterministic repeats answered from memory (see below); none: off"""


class Config(_Frozen):
    server: ServerConfig = ServerConfig()
    """listen address, workers, body limit, upstream HTTP client"""
    auth: AuthConfig = AuthConfig()
    """API keys and their tenants"""
    pools: list[PoolConfig] = Field(default_factory=list)
    """upstream pools of OpenAI-compatible replicas; empty: the embedded engine"""
    embeddings: UpstreamConfig | None = None
    """a pool for `POST /v1/embeddings` (a pool's fields without `name`); none: the pool that serves the requested
    model"""
    prompt: PromptConfig = PromptConfig()
    """the chat prompt rewrite for the prefix cache"""
    limits: LimitsConfig = LimitsConfig()
    """admission per tenant: rate limits and token caps"""
    tokenizer: str | None = None
    """a Hugging Face `tokenizer.json` for exact prompt-token counts; none: an estimate (4 characters a token, more for
    non-ASCII text), but for the embedded engine, whose model's own tokenizer counts"""
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    """per-tenant settings, by tenant name (the names in `auth.keys`; `default` in open mode)"""
    retrieval: RetrievalConfig = RetrievalConfig()
    """where retrieved chunks live and how text is embedded"""
    redis: RedisConfig | None = None
    """Redis shared by gateway replicas, for rate limits, caches and stored responses; none: each process on its
    own"""
    responses: ResponsesConfig = ResponsesConfig()
    """the Responses API's stored conversations (`previous_response_id`)"""
    engine: EngineConfig = EngineConfig()
    """the embedded vLLM engine"""
    metrics: MetricsConfig = MetricsConfig()
    """what `/metrics` labels"""
    access_log: AccessLogConfig = AccessLogConfig()
    """one JSON line per request"""
    data_dir: str = Field(default_factory=lambda: str(Path.home() / ".cache" / "prefixgate"),
                          json_schema_extra={"shown_default": "`~/.cache/prefixgate`"})
    """where the tiny model, the engine log and embedded Qdrant live"""
    resolved_keys: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    resolved_admin_key: str | None = Field(None, repr=False, exclude=True)
    resolved_salt_secret: str | None = Field(None, repr=False, exclude=True)  # None: the data_dir file's

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, pools: list[PoolConfig]) -> list[PoolConfig]:
        names = [pool.name for pool in pools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"pool names must be unique; repeated: {', '.join(duplicates)}")
        for pool in pools:
            if pool.overflow_to is not None and (pool.overflow_to not in names or pool.overflow_to == pool.name):
                raise ValueError(f"pool '{pool.name}': overflow_to names no other pool ('{pool.overflow_to}')")
        _check_continuation_layout(pools)
        return pools

    @model_validator(mode="after")
    def _action_kinds(self) -> Config:
        """A kind in prompt.actions must be one a detector finds; a tenant's may name top-level patterns."""
        for where, prompt in (("prompt", self.prompt), *(
                (f"tenants.{name}.prompt", self.tenant_prompt(name)) for name in self.tenants)):
            known = span_kinds(prompt)
            unknown = sorted(set(prompt.actions) - set(known))
            if unknown:
                raise ValueError(
                    f"{where}.actions: no span is of kind {', '.join(unknown)} (kinds: {', '.join(known)})")
        return self

    def _tenant_section(self, tenant: str, name: Literal["prompt", "limits"]) -> Any:
        """The top-level section ``name`` with this tenant's own fields of it laid over them."""
        base = getattr(self, name)
        own = self.tenants.get(tenant)
        if own is None:
            return base
        return type(base).model_validate({**base.model_dump(), **getattr(own, name).model_dump(exclude_unset=True)})

    def tenant_prompt(self, tenant: str) -> PromptConfig:
        return self._tenant_section(tenant, "prompt")

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_file(cls, path: str | None) -> str | None:
        if path is not None and not Path(path).is_file():
            raise ValueError(f"no tokenizer file at {path} (a Hugging Face tokenizer.json)")
        return path

    def tenant_limits(self, tenant: str) -> LimitsConfig:
        return self._tenant_section(tenant, "limits")

    def qdrant_path(self) -> Path:
        return Path(self.retrieval.qdrant_path or Path(self.data_dir) / "qdrant")

    @property
    def reachable_tenants(self) -> set[str]:
        """The tenants a request can be: those API keys name, or in open mode the one every request is."""
        return set(self.resolved_keys.values()) or {OPEN_TENANT}

    @property
    def unreachable_tenants(self) -> list[str]:
        """Tenants with settings that no request can ever get: no API key names them."""
        return sorted(set(self.tenants) - self.reachable_tenants)

    @property
    def wants_retrieval(self) -> bool:
        return any(t.retrieval is not None and t.retrieval.enabled for t in self.tenants.values())

    @property
    def wants_engine(self) -> bool:
        return self.engine.enabled if self.engine.enabled is not None else not self.pools


def _check_continuation_layout(pools: list[PoolConfig]) -> None:
    """A pool that starts answers short (``continue_long``) and the pool that would continue them are both engines'
    (kind openai): a litellm pool neither reports the cut nor writes on from a partial answer. Which pool continues is
    the first one that is not short among those serving the model, so each model the short pool may serve is checked
    (a pool that lists no models may serve any; a litellm pool serves only those it lists)."""
    for short in pools:
        if short.output != "short" or not short.continue_long:
            continue
        if short.kind != "openai":
            raise ValueError(f"pool '{short.name}': continue_long needs a pool of kind openai; a {short.kind} pool "
                             "cannot cut an answer for another pool to continue")
        models = set(short.models) or {m for pool in pools if pool.kind != "openai" for m in pool.models}
        for model in sorted(models):
            serving = [p for p in pools if model in p.models or (p.kind == "openai" and not p.models)]
            long = next((p for p in serving if p.output != "short" and p is not short), None)
            if long is not None and long.kind != "openai":
                raise ValueError(f"pool '{short.name}' continues its cut answers to {model} in pool '{long.name}', "
                                 f"which is of kind {long.kind} and cannot continue an answer; put a pool of kind "
                                 "openai before it or turn continue_long off")
