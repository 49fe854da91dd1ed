"""A pool's configuration, one model per kind of pool: ``BasePoolConfig`` holds what every pool has (its name,
models, timeouts, length routing, token caps, backpressure, overflow), ``OpenAIPoolConfig`` adds replicas reached
over HTTP (``UpstreamConfig``), ``LitellmPoolConfig`` a provider reached through litellm. ``PoolConfig`` tells them
apart by ``kind``; each kind's pool class (``POOL_KINDS``, ``proxy.upstream.pools``) names its model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Discriminator, Field, Tag, model_validator

from proxy.config.frozen import Frozen as _Frozen
from proxy.config.upstream import Timeouts, UpstreamConfig


class BasePoolConfig(_Frozen):
    """The fields every kind of pool has."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """unique; letters, digits, `_ . -`"""
    kind: str = "openai"
    """what the pool is, and so which of the fields below it takes (those marked with a kind are that kind's alone)"""
    models: list[str] = Field(default_factory=list)
    """model names served; empty = learn them from the replicas' `/v1/models` (a `litellm` pool serves only those it
    lists)"""
    timeouts: Timeouts = Timeouts()
    """seconds allowed for each part of an exchange"""
    overflow_to: str | None = None
    """the name of another pool: requests this pool sheds (for any reason of `prefixgate_shed_total`, below) go there
    instead, once (that pool's own `overflow_to` is not followed). Their answers
    carry `x-prefixgate-pool: OTHER` and `x-prefixgate-overflow: THIS`;
    `prefixgate_shed_total{reason="..._overflowed"}` counts them"""
    max_tokens_limit: int | None = Field(None, ge=1)
    """most output tokens a request may ask of this pool; above it the request is clamped or refused by the tenant's
    `max_tokens_action`, with a message that names `pool 'NAME'.max_tokens`"""
    max_tokens_default: int | None = Field(None, ge=1)
    """`max_tokens` given to requests for this pool that name none (when the tenant's `default_max_tokens` gave none)"""
    max_model_len: int | None = Field(None, ge=1, json_schema_extra={"shown_default": "learned"})
    """longest prompt plus output the pool's engines take, in tokens: a request whose output cap (its own, or a
    default) is more than its prompt leaves of it is sent with the cap lowered to what fits, and its answer says
    so in `x-prefixgate-output-clamped: CAP`, where the engine would refuse it (vLLM's 400). The prompt is counted
    with `tokenizer` (exact, but for the template's markers: 2 % and 64 tokens are left spare), else estimated and
    taken as 1.5 times the estimate, so text that tokenizes finer still than that can be refused. None: each
    model's `max_model_len` as the replicas' `/v1/models` answers it (read at start where the pool declares no
    `models`, and on each `GET /v1/models`); unknown: no clamp"""
    output: Literal["any", "short", "long"] = "any"
    """length routing among the pools that serve the same model: a `short` pool takes the requests whose predicted p90
    output is at most `short_threshold` tokens; the rest go to the first pool that is not `short` (`long` or `any`);
    while the prediction misses short answers (`min_recall`) the two take requests as one, the less loaded first.
    A request may name its pool with the header `x-prefixgate-pool: NAME` (400 if no such pool or it does not serve
    the model); answers say which pool served them in `x-prefixgate-pool` when length routing is on or the header
    was sent"""
    short_threshold: int = Field(256, ge=1)
    """with `output: short`: the largest predicted p90 output, in tokens, this pool takes"""
    min_recall: float = Field(0.95, ge=0, le=1)
    """with `output: short`: the split into short and long pools holds only while at least this share of the recent
    truly short answers (the last 512, once 64 are in) were predicted short; below it, and until it is measured,
    requests go to the less loaded of this pool and the long pool, as one pool. A short answer predicted long waits
    in the long pool behind long answers, so each one sent there gives back part of what the split gains for short
    answers' p95; how many the split can afford depends on the engines and the load and has not been measured, so
    the default asks that nearly all be predicted short. `prefixgate_length_short_recall` and
    `prefixgate_length_split` show the state.
    0: always split. With `continue_long` it applies only to the requests that may not be cut"""
    decided_after: int = Field(8, ge=0)
    """with `output: short`: a template whose last this many answers all fell a factor of two or more to one side of
    `short_threshold` (at most half of it, or at least twice it) goes to the pool for that side, whatever
    `min_recall` says of the split (pool reason `history`); one answer out of line hands it back to the split or the
    merge. Apps whose answers never straddle the threshold are routed after this many, not after the 64 short
    answers over all traffic that `min_recall` waits for (docs/tuning.md). While the merge has requests in this
    pool, a template decided short goes where the merge sends it (pool reason `merged`), not behind them. With
    `continue_long`, a template so decided short is not cut, and one decided long starts long. 0: off"""
    continue_long: bool = False
    """with `output: short`: start short, continue long (both pools of kind openai). A plain-text answer (no tools,
    `response_format`, guided decoding, `n` > 1, `logprobs`, `echo`, `best_of`, `seed`, presence or frequency
    penalty) starts in this pool with its output capped at
    `short_threshold`, unless its template's history says a short answer is unlikely (`long_when_short_below`);
    when this pool's engine stops it there and the client allowed more, the long pool writes the rest
    (`continue_final_message`) and the client sees one answer: one id, no text lost or repeated, summed usage,
    stop strings honoured across the seam. A misplaced long answer costs one more prefill of its prompt and
    `short_threshold` tokens on the long pool. `prefixgate_continued_total`, `prefixgate_continuation_seam_seconds`
    and `prefixgate_continuation_prefill_tokens_total` show it. Off by default: on two-slot CPU engines it kept
    too little of the split's gain to be worth its seams (docs/benchmarks.md, docs/tuning.md). false: route every
    request by its predicted p90"""
    long_when_short_below: float = Field(0.2, ge=0, le=1)
    """with `continue_long`: a request goes straight to the long pool when, of its template's recent answers (once 8
    are known), fewer than this share fit `short_threshold`; templates not yet known start short"""
    priority_hints: bool = False
    """send vLLM's `priority` with each request: its predicted output tokens (p50), so an engine started with
    `--scheduling-policy priority` takes the shortest-predicted waiting request first. A client's own `priority`
    is kept. Engines without that flag refuse the field: turn it on only with it"""
    max_in_flight: int | None = Field(None, ge=1)
    """backpressure: most requests in flight per replica (the pool's cap is this times its replicas; a `litellm` pool's,
    this many provider calls at once); past it requests wait in the pool's queue. None: no cap, no queue"""
    queue_size: int = Field(256, ge=0)
    """places in the wait queue, shared fairly by tenants: a tenant may hold at most the places divided by the tenants
    waiting (rounded up); when the queue is full, a tenant under its share takes the place of the newest waiter of
    the tenant furthest over its own (that one gets 503 `queue_share_exceeded`); freed slots go to tenants in turn.
    A full queue sheds at once with 503 `queue_full`"""
    queue_timeout: float = Field(30.0, gt=0)
    """seconds a request may wait for a slot, then 503 `queue_timeout`. Every 503 of the queue carries `Retry-After`. A
    client that closes its connection while queued gives up its place at once"""
    stream_keepalive: float | None = Field(None, gt=0)
    """seconds: a streaming request still waiting for its first token (queued or in prefill) this long gets its `200`
    and SSE headers, then a comment line `: keep-alive` every this many seconds until the first chunk, so idle
    timeouts of load balancers in between (often 60 s) do not cut it. SSE clients, OpenAI's SDKs included, skip
    comments. Once the 200 is out, a later refusal (queue timeout, engine error) arrives as the stream's last event,
    `data: {"error": ...}`; pick a value above the usual wait"""

    @model_validator(mode="before")
    @classmethod
    def _fields_of_another_kind(cls, data: Any) -> Any:
        """A field that another kind of pool has is refused with its kind named, not only as unknown."""
        if isinstance(data, dict):
            kind = cls.model_fields["kind"].default
            for field in data:
                owners = [] if field in cls.model_fields else \
                    [other for other, model in pool_kinds().items() if field in model.model_fields]
                if owners:
                    raise ValueError(f"{field} is a field of pools of kind {' or '.join(owners)}; pool "
                                     f"'{data.get('name')}' is of kind {kind}")
        return data


class OpenAIPoolConfig(BasePoolConfig, UpstreamConfig):
    """replicas of an OpenAI-compatible engine (vLLM) reached over HTTP: the gateway chooses the replica (`balance`),
    checks their health, reads their engines and retries"""

    kind: Literal["openai"] = "openai"


class LitellmPoolConfig(BasePoolConfig):
    """no replicas: each request is one call through litellm's async completion API to any provider litellm supports
    (install `prefixgate[providers]`). Answers are turned back into OpenAI's JSON and SSE framing; provider 4xx keep
    their status, other failures are 502 `provider_error`. vLLM-only fields (`cache_salt`) are not sent. Such a pool
    serves only the `models` it lists, and is the usual `overflow_to` target"""

    kind: Literal["litellm"] = "litellm"
    litellm_model: str | None = Field(None, json_schema_extra={"shown_default": "the request's model"})
    """the provider/model string litellm calls, e.g. `anthropic/claude-3-5-haiku-latest` or `openai/gpt-4o-mini`"""
    api_base: str | None = Field(None, json_schema_extra={"shown_default": "provider default"})
    """the provider's base URL"""
    api_key: str | None = Field(None, repr=False)
    """the provider's key, as litellm sends it"""


POOL_CONFIGS: tuple[type[BasePoolConfig], ...] = (OpenAIPoolConfig, LitellmPoolConfig)
"""Every kind's config model; the first is the kind of a pool that names none."""


def pool_kinds() -> dict[str, type[BasePoolConfig]]:
    """Each kind (its model's ``kind``) and its config model."""
    return {model.model_fields["kind"].default: model for model in POOL_CONFIGS}


def _kind(data: Any) -> Any:
    if isinstance(data, dict):
        return data.get("kind", POOL_CONFIGS[0].model_fields["kind"].default)
    return getattr(data, "kind", None)


PoolConfig: TypeAlias = Annotated[  # one member per kind (POOL_CONFIGS), tagged with its kind
    Annotated[OpenAIPoolConfig, Tag("openai")] | Annotated[LitellmPoolConfig, Tag("litellm")],
    Discriminator(_kind, custom_error_type="pool_kind",
                  custom_error_message=f"kind must be one of: {', '.join(pool_kinds())}"),
]
