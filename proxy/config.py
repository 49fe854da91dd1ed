"""The one frozen configuration object, loaded once at start-up from YAML and the environment.

The environment is read here and nowhere else. Every validation error names the file, the
field path and what is wrong, so a bad deploy fails at start with a line a human can act on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from policies.templates import compile_template
from proxy.frozen import Frozen as _Frozen
from proxy.pool_config import PoolConfig, UpstreamConfig
from proxy.retrieval_config import AnswerCacheConfig, RedisConfig, RetrievalConfig, TenantRetrieval

ENV_CONFIG = "PREFIXGATE_CONFIG"
ENV_UPSTREAM = "PREFIXGATE_UPSTREAM"
ENV_PORT = "PREFIXGATE_PORT"
ENV_HOST = "PREFIXGATE_HOST"
ENV_DATA_DIR = "PREFIXGATE_DATA_DIR"


class ConfigError(Exception):
    """A configuration problem, worded for the operator who has to fix it."""


class TenantKey(_Frozen):
    """One API key. ``key_env`` keeps the secret out of the file; exactly one of the two is set."""

    tenant: str = Field(min_length=1)
    key: str | None = Field(None, min_length=8, repr=False)
    key_env: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TenantKey:
        if (self.key is None) == (self.key_env is None):
            raise ValueError("set exactly one of 'key' or 'key_env'")
        return self


class AuthConfig(_Frozen):
    """No keys means open mode: every request is the 'default' tenant (sidecar on loopback)."""

    keys: list[TenantKey] = Field(default_factory=list)


class ServerConfig(_Frozen):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    http_client: Literal["aiohttp", "httpx"] = "aiohttp"
    ready_timeout: float = Field(2.0, gt=0)


class EngineConfig(_Frozen):
    """The embedded default: a local vLLM CPU engine, started only when no pool is configured."""

    enabled: bool | None = None  # None: start one exactly when no pool is configured
    served_model_name: str = "prefixgate-tiny"
    model_dir: str | None = None  # a model to serve; default: the tiny model built under data_dir
    port: int | None = Field(None, ge=1, le=65535)
    max_model_len: int = Field(4096, ge=128)
    kv_cache_gib: int = Field(1, ge=1)
    startup_timeout: float = Field(240.0, gt=0)
    extra_args: list[str] = Field(default_factory=list)


class VolatilePattern(_Frozen):
    """A tenant's own volatile span: a regex; a group named ``value`` narrows the span to it."""

    name: str = Field(min_length=1)
    regex: str = Field(min_length=1)

    @field_validator("regex")
    @classmethod
    def _compiles(cls, regex: str) -> str:
        try:
            re.compile(regex)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return regex


class TemplateConfig(_Frozen):
    """A canonical system preamble with ``{variables}``; see docs/configuration.md, prompt.templates."""

    name: str = Field(min_length=1)
    text: str = Field(min_length=1)

    @model_validator(mode="after")
    def _compiles(self) -> TemplateConfig:
        compile_template(self.name, self.text)  # its ValueError names the template and the problem
        return self


class PromptConfig(_Frozen):
    """How chat prompts are made cache-friendly (see docs/configuration.md, section prompt)."""

    volatile: Literal["relocate", "strip", "keep"] = "relocate"
    scope: Literal["system", "history"] = "system"
    note: Literal["last_user", "system_message"] = "last_user"
    canonical: bool = True
    patterns: list[VolatilePattern] = Field(default_factory=list)
    templates: list[TemplateConfig] = Field(default_factory=list)
    cache_salt: Literal["isolate", "share"] = "isolate"


class LimitsConfig(_Frozen):
    """Admission per tenant (see docs/configuration.md, section limits). None: no limit."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)  # prompt tokens + reserved output, settled with usage
    max_tokens: int | None = Field(None, ge=1)  # most output tokens a request may ask for
    max_tokens_action: Literal["clamp", "reject"] = "clamp"
    default_max_tokens: int | None = Field(None, ge=1)  # given to requests that name none
    max_input_tokens: int | None = Field(None, ge=1)
    output_reservation: int = Field(256, ge=0)  # tokens held for an answer with no max_tokens nor history


class TenantConfig(_Frozen):
    """Per-tenant settings. ``prompt`` and ``limits`` fields here replace the top-level ones."""

    prompt: PromptConfig = PromptConfig()
    limits: LimitsConfig = LimitsConfig()
    retrieval: TenantRetrieval | None = None
    answer_cache: AnswerCacheConfig | None = None  # opt-in


class MetricsConfig(_Frozen):
    """Which tenants get their own label value on /metrics; the rest count as ``other``."""

    tenants: list[str] | None = None  # None: the configured tenants, by name
    max_tenants: int = Field(100, ge=0)  # at most this many of them


class Config(_Frozen):
    server: ServerConfig = ServerConfig()
    auth: AuthConfig = AuthConfig()
    pools: list[PoolConfig] = Field(default_factory=list)
    embeddings: UpstreamConfig | None = None
    prompt: PromptConfig = PromptConfig()
    limits: LimitsConfig = LimitsConfig()
    tokenizer: str | None = None  # a tokenizer.json for exact token counts; default: 4 characters a token
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    retrieval: RetrievalConfig = RetrievalConfig()
    redis: RedisConfig | None = None  # caches shared by replicas; default: in-process only
    engine: EngineConfig = EngineConfig()
    metrics: MetricsConfig = MetricsConfig()
    data_dir: str = Field(default_factory=lambda: str(Path.home() / ".cache" / "prefixgate"))
    resolved_keys: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True)

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
        return pools

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
    def wants_retrieval(self) -> bool:
        return any(t.retrieval is not None and t.retrieval.enabled for t in self.tenants.values())

    @property
    def wants_engine(self) -> bool:
        return self.engine.enabled if self.engine.enabled is not None else not self.pools


def _field_path(location: tuple[Any, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top level)"


def _format_errors(source: str, error: ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for item in error.errors():
        lines.append(f"  {_field_path(item['loc'])}: {item['msg']}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Environment beats the file for the sidecar knobs, so one image serves many deployments."""
    data = dict(data)
    upstream = env.get(ENV_UPSTREAM, "").strip()
    if upstream:
        replicas = [url.strip() for url in upstream.split(",") if url.strip()]
        data["pools"] = [{"name": "default", "replicas": replicas}]
    server = dict(data.get("server") or {})
    if env.get(ENV_PORT):
        server["port"] = env[ENV_PORT]
    if env.get(ENV_HOST):
        server["host"] = env[ENV_HOST]
    if server:
        data["server"] = server
    if env.get(ENV_DATA_DIR):
        data["data_dir"] = env[ENV_DATA_DIR]
    return data


def _resolve_keys(config: Config, source: str, env: Mapping[str, str]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for index, entry in enumerate(config.auth.keys):
        secret = entry.key
        if entry.key_env is not None:
            secret = env.get(entry.key_env)
            if not secret:
                raise ConfigError(
                    f"{source}: auth.keys[{index}].key_env: environment variable {entry.key_env} is not set"
                )
        assert secret is not None
        if secret in keys:
            raise ConfigError(f"{source}: auth.keys[{index}]: the same key is given to two tenants")
        keys[secret] = entry.tenant
    return keys


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> Config:
    """Build the Config from an optional YAML file, the environment and CLI overrides (in that order)."""
    env = os.environ if env is None else env
    if path is None and env.get(ENV_CONFIG):
        path = env[ENV_CONFIG]
    data = _read_yaml(Path(path)) if path is not None else {}
    return build_config(data, env=env, source=str(path) if path is not None else "environment", overrides=overrides)


def build_config(data: Mapping[str, Any], *, env: Mapping[str, str], source: str = "config",
                 overrides: Mapping[str, Any] | None = None) -> Config:
    """Validate already-parsed settings; ``source`` names where they came from in error messages."""
    merged = _apply_env(dict(data), env)
    if overrides:
        server = dict(merged.get("server") or {})
        server.update({k: v for k, v in overrides.items() if v is not None})
        merged["server"] = server
    try:
        config = Config.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None
    keys = _resolve_keys(config, source, env)
    return config.model_copy(update={"resolved_keys": keys})


def with_engine_pool(config: Config, base_url: str, model: str) -> Config:
    """The config the app runs with once the embedded engine is up: one pool pointing at it."""
    pool = PoolConfig(name="local", replicas=[base_url], models=[model])
    return config.model_copy(update={"pools": [pool]})


def dump_config(config: Config) -> str:
    """Serialize for worker processes (uvicorn --workers re-imports the app in each)."""
    payload = config.model_dump(mode="json")
    payload["resolved_keys"] = config.resolved_keys
    return orjson.dumps(payload).decode()


def config_from_dump(text: str) -> Config:
    payload = orjson.loads(text)
    keys = payload.pop("resolved_keys", {})
    return Config.model_validate(payload).model_copy(update={"resolved_keys": keys})
