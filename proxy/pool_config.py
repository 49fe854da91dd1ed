"""Configuration of upstream pools: replicas, timeouts, health, retries, balance, length routing,
token caps and backpressure. Part of the one frozen config (proxy/config.py), kept apart because
it is its own feature.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from proxy.frozen import Frozen as _Frozen


class Timeouts(_Frozen):
    """Seconds. first_byte covers response headers and, for streams, the first chunk (the prefill)."""

    connect: float = Field(5.0, gt=0)
    first_byte: float = Field(120.0, gt=0)
    total: float = Field(900.0, gt=0)


class HealthChecks(_Frozen):
    """Active checks (GET health_path every ``interval`` seconds; 0: off) and passive ejection: a
    replica that fails ``eject_after`` exchanges in a row, or one check, sits out ``backoff`` seconds,
    doubling per repeat up to ``max_backoff``, then takes one request at a time until one succeeds."""

    interval: float = Field(5.0, ge=0)
    timeout: float = Field(2.0, gt=0)
    eject_after: int = Field(3, ge=1)
    backoff: float = Field(1.0, gt=0)
    max_backoff: float = Field(30.0, gt=0)


class EngineMetrics(_Frozen):
    """Reading each replica's own /metrics (vLLM's) every ``interval`` seconds (0: off): exposed per
    replica on prefixgate's /metrics, and the requests other senders have at a replica (other
    workers, gateways, direct clients) count toward its load in the replica choice. A reading
    older than three intervals counts for nothing; an upstream that is not vLLM is left alone."""

    interval: float = Field(2.0, ge=0)
    timeout: float = Field(2.0, gt=0)
    path: str = "/metrics"


def _check_base_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"'{url}' is not an http(s) base URL such as http://127.0.0.1:8000/v1")
    return url.rstrip("/")


class UpstreamConfig(_Frozen):
    """A set of interchangeable OpenAI-compatible replicas (base URLs ending in /v1, as SDKs use)."""

    replicas: list[str] = Field(min_length=1)
    models: list[str] = Field(default_factory=list)
    timeouts: Timeouts = Timeouts()
    api_key: str | None = Field(None, repr=False)  # sent to the upstream, e.g. vLLM --api-key
    health_path: str = "/health"
    health: HealthChecks = HealthChecks()
    engine_metrics: EngineMetrics = EngineMetrics()
    max_connections: int = Field(1024, ge=1)
    # A connection refused or a 502/503 before any byte reached the client is tried again on another
    # replica, ``retries`` times at most, while retries under way stay within retry_budget x requests
    # under way (at least 3 at once).
    retries: int = Field(1, ge=0, le=3)
    retry_budget: float = Field(0.2, ge=0, le=1)
    # Replica choice: "prefix" sends prompts that start alike to the same replica (its prefix cache
    # holds that start) while its in-flight load stays within load_bound x the mean; "least_loaded"
    # ignores the prompt. affinity_chars: how much of the rendered prompt's start forms the key;
    # home_slack: requests the prefix's home replica may hold past the bound (a spill costs a cold prefill).
    balance: Literal["prefix", "least_loaded"] = "prefix"
    load_bound: float = Field(1.25, ge=1.0)
    home_slack: int = Field(1, ge=0)
    affinity_chars: int = Field(1024, ge=1)

    @field_validator("replicas")
    @classmethod
    def _urls(cls, replicas: list[str]) -> list[str]:
        return [_check_base_url(url) for url in replicas]


class PoolConfig(UpstreamConfig):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    replicas: list[str] = Field(default_factory=list)  # required unless kind is litellm
    # kind "litellm": no replicas; requests go through litellm.acompletion to litellm_model (a
    # provider/model string such as "anthropic/claude-3-5-haiku-latest"; default: the request's own
    # model), at api_base when set, with api_key. It serves only the models it lists.
    kind: Literal["openai", "litellm"] = "openai"
    litellm_model: str | None = None
    api_base: str | None = None
    # When this pool sheds a request (queue full, tenant past its share, queue timeout, no healthy
    # replica), it goes to this pool instead, once (the overflow pool's own overflow_to is not followed).
    overflow_to: str | None = None
    # Output tokens this pool allows: a request above max_tokens_limit is clamped or refused (the
    # tenant's max_tokens_action); one without max_tokens gets max_tokens_default (when the tenant sets none).
    max_tokens_limit: int | None = Field(None, ge=1)
    max_tokens_default: int | None = Field(None, ge=1)
    # Length routing among pools that serve the same model: a "short" pool takes the requests whose
    # predicted p90 output is at most short_threshold tokens; the others go to the first pool that
    # is not "short" (a "long" or "any" pool).
    output: Literal["any", "short", "long"] = "any"
    short_threshold: int = Field(256, ge=1)
    # Backpressure: at most max_in_flight requests per replica (None: no cap); past it requests wait
    # in a queue of queue_size, shared fairly by tenants, for queue_timeout seconds, else 503.
    max_in_flight: int | None = Field(None, ge=1)
    queue_size: int = Field(256, ge=0)
    queue_timeout: float = Field(30.0, gt=0)
    # A stream still waiting for its first token (queued or in prefill) after stream_keepalive seconds
    # gets its 200 and SSE comment lines every stream_keepalive seconds, so idle timeouts of load
    # balancers in between do not cut it (see proxy/keepalive.py). None: off.
    stream_keepalive: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _kind_fields(self) -> PoolConfig:
        if self.kind == "openai" and not self.replicas:
            raise ValueError(f"pool '{self.name}' needs replicas (base URLs such as http://127.0.0.1:8000/v1)")
        if self.kind == "litellm" and self.replicas:
            raise ValueError(f"pool '{self.name}' is of kind litellm: give api_base instead of replicas")
        if self.kind == "openai" and (self.litellm_model or self.api_base):
            raise ValueError(f"pool '{self.name}': litellm_model and api_base are for kind litellm")
        return self
