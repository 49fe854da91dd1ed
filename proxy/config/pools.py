"""Configuration of upstream pools: replicas, timeouts, health, retries, balance, length routing,
token caps and backpressure. Part of the one frozen ``Config``, kept apart because
it is its own feature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from proxy.config.frozen import Frozen as _Frozen


class Timeouts(_Frozen):
    """Seconds. first_byte covers response headers and, for streams, the first chunk (the prefill)."""

    connect: float = Field(5.0, gt=0)
    """seconds to open a connection"""
    first_byte: float = Field(120.0, gt=0)
    """seconds to response headers and, for streams, the first chunk (covers queueing and prefill; a non-streaming
    answer's headers come only when it is complete)"""
    total: float = Field(900.0, gt=0)
    """seconds for the whole exchange"""


class HealthChecks(_Frozen):
    """Active checks (GET health_path every ``interval`` seconds; 0: off) and passive ejection: a
    replica that fails ``eject_after`` exchanges in a row, or one check, sits out ``backoff`` seconds,
    doubling per repeat up to ``max_backoff``, then takes one request at a time until one succeeds."""

    interval: float = Field(5.0, ge=0)
    """seconds between active checks (GET `health_path` on each replica of a pool with several; 0: off). A failed check
    ejects the replica, a passed one brings it back"""
    timeout: float = Field(2.0, gt=0)
    """seconds a check may take"""
    eject_after: int = Field(3, ge=1)
    """consecutive failed exchanges (connection refused or reset, a 5xx, a stream cut short; not timeouts, which are
    load) that eject a replica"""
    backoff: float = Field(1.0, gt=0)
    """seconds an ejected replica sits out; doubled after each failure that follows, up to `max_backoff`. When
    the time is up it takes one request at a time until one succeeds. With no usable replica left, requests get
    503 `no_healthy_upstream` at once, with `Retry-After` set to when the first replica may be tried again"""
    max_backoff: float = Field(30.0, gt=0)
    """longest ejection, in seconds"""


class EngineMetrics(_Frozen):
    """Reading each replica's own /metrics (vLLM's) every ``interval`` seconds (0: off): exposed per
    replica on prefixgate's /metrics, and the requests other senders have at a replica (other
    workers, gateways, direct clients) count toward its load in the replica choice. A reading
    older than three intervals counts for nothing; an upstream that is not vLLM is left alone."""

    interval: float = Field(2.0, ge=0)
    """seconds between readings of each replica's own `/metrics` (vLLM's; 0: off). prefixgate's `/metrics` shows per
    replica the engine's running and waiting requests, KV-cache usage, prefix-cache hit rate and preemptions
    (`prefixgate_engine_*`), and the replica choice adds the requests other senders have at an engine
    (running + waiting less this process's own in flight: other uvicorn workers, other gateways, direct
    clients), as two readings in a row saw them, to that replica's load. Readings fall on the wall clock's
    multiples of the interval, so gateways that share engines read them at the same instants
    (`kv_events.shared_load` counts only what they read). A reading older than three
    intervals counts for nothing; an upstream whose `/metrics` is not vLLM's (404, or no scheduler
    gauges) is asked again once a minute"""
    timeout: float = Field(2.0, gt=0)
    """seconds a reading may take"""
    path: str = "/metrics"
    """on the replica's origin"""


class KvEvents(_Frozen):
    """With `balance: kv_events`: where the engines publish the blocks they cache, and how the gateway reads a
    prompt's tokens to match them (vLLM's `--kv-events-config`, deploy/ has the flags)."""

    tokenizer: str | None = Field(None, json_schema_extra={"shown_default": "required"})
    """the model's folder as the engines load it (tokenizer and chat template files): a request's tokens are what
    the engine will compute, so they can be matched with the blocks it reports"""
    endpoints: list[str] = Field(default_factory=list)
    """each replica's event socket in replica order, such as `tcp://10.0.0.5:5557`; none: each replica's own
    `GET /kv_event_sources` names it (a `*` host becoming the replica's)"""
    topic: str | None = Field(None, json_schema_extra={"shown_default": "the engine's"})
    """the events' topic (`--kv-events-config`'s `topic`)"""
    max_chars: int = Field(32768, ge=256)
    """how many characters of the rendered prompt are tokenized for the match: the prefix an engine may hold"""
    held_bound: float = Field(3.0, ge=1.0)
    """the replica whose engine holds the most of a prompt takes it while its requests in flight stay within this
    times the pool's mean (the others stay within `load_bound`): past it, the prompt goes where it is prefilled
    cold, a whole prefill spent to skip a wait behind requests that are mostly cached; lower it where engines'
    queues matter more than their caches (docs/tuning.md). On a pool of this many replicas or fewer a holder
    keeps its prompt whatever its load"""
    shared_load: bool = False
    """with other senders at the engines (other gateways): count each engine's running + waiting as every gateway
    reads it at the same instants (`engine_metrics.interval`), not this process's own requests plus the others' as
    last read. Gateways then route a request alike nearly always instead of mostly, but react to load one
    reading late: on prefixgate's benchmark, hit rate and load spread were worse (docs/tuning.md)"""
    max_blocks: int = Field(1 << 20, ge=1)
    """most blocks the index keeps of one replica; past it (its evictions went missing) the replica is forgotten and
    learnt again from its next events"""

    @field_validator("tokenizer")
    @classmethod
    def _model_folder(cls, folder: str | None) -> str | None:
        if folder is not None and not (Path(folder) / "tokenizer_config.json").is_file():
            raise ValueError(f"no model folder at {folder}: it needs the model's tokenizer_config.json (and its "
                             "tokenizer and chat template), as the engines load them")
        return folder


def _check_base_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"'{url}' is not an http(s) base URL such as http://127.0.0.1:8000/v1")
    return url.rstrip("/")


class UpstreamConfig(_Frozen):
    """A set of interchangeable OpenAI-compatible replicas (base URLs ending in /v1, as SDKs use)."""

    replicas: list[str] = Field(min_length=1)
    """base URLs such as `http://10.0.0.5:8000/v1`"""
    models: list[str] = Field(default_factory=list)
    """model names served; empty = learn them from the replicas' `/v1/models`"""
    timeouts: Timeouts = Timeouts()
    """seconds allowed for each part of an exchange"""
    api_key: str | None = Field(None, repr=False)
    """sent upstream as `Authorization: Bearer ...` (vLLM `--api-key`)"""
    health_path: str = "/health"
    """probed on the replica's origin by `/ready`"""
    health: HealthChecks = HealthChecks()
    """active checks and passive ejection of failing replicas"""
    engine_metrics: EngineMetrics = EngineMetrics()
    """reading each replica's engine from its own `/metrics`"""
    max_connections: int = Field(1024, ge=1)
    """keep-alive connections per replica"""
    retries: int = Field(1, ge=0, le=3)
    """a refused connection or a 502/503 from a replica, before any byte reached the client, is tried again on another
    usable replica, this many times at most (0-3); never after the first byte: a stream that breaks later ends with
    an SSE error event"""
    retry_budget: float = Field(0.2, ge=0, le=1)
    """retries under way may be at most this share of the pool's requests under way (at least 3 at once), so retries
    cannot multiply an outage"""
    balance: Literal["prefix", "kv_events", "least_loaded"] = "prefix"
    """replica choice: `prefix` sends prompts that start alike to the same replica (consistent hashing over the
    rendered prompt's first `affinity_chars` characters, the model and the cache salt, so every prefixgate process
    picks the same engine with no shared state), within `load_bound`; `kv_events` sends a prompt to the replica
    whose engine holds the longest part of it now, by the blocks the engines report (`kv_events`; of engines holding
    as much, the less loaded), while that replica's requests in flight stay within `kv_events.held_bound` times the
    pool's mean, and a prompt no engine holds within that to the emptier of its two replicas on the ring (by the
    blocks their engines report; the less loaded where both hold about as many), from there within `load_bound` as
    with `prefix`; `least_loaded` takes the replica with the fewest requests in flight"""
    kv_events: KvEvents = KvEvents()
    """with `balance: kv_events`: where the engines' KV-cache events come from, and the model's files to match
    prompts with them"""
    load_bound: float = Field(1.25, ge=1.0)
    """with `prefix`: a replica takes a request only while its in-flight count, this one included, stays within this
    multiple of the pool's mean; past it the request goes to the next replica on the ring (>= 1)"""
    home_slack: int = Field(1, ge=0)
    """with `prefix`: requests a prompt's home replica (the first healthy one on its ring walk, the same in every
    prefixgate process) may hold past `load_bound` when no other replica within the bound holds the prompt warm
    (see `warm_memory_s`); other replicas get none. A spill to a replica that never saw the prompt costs it a cold
    prefill, and at a few requests per engine the bound alone spills hot prefixes often. 0: the bare bound"""
    warm_memory_s: float = Field(300.0, ge=0)
    """with `prefix`: for how long after a replica last served a prompt prefix this prefixgate process counts it as
    warm: a prompt's requests go to the least loaded of its home and its warm replicas within the bound, so an
    over-bound home's overflow lands where the prefix is cached rather than on a replica that would prefill it cold
    (4 CPU engines, docs/benchmarks.md); about how long an engine keeps an idle prefix's blocks. 0: off"""
    affinity_chars: int = Field(1024, ge=1)
    """with `prefix`: how many characters of the rendered prompt (tools, then each message) form the key, about 256
    tokens; prompts shorter than this are keyed on all of it, questions included"""

    @field_validator("replicas")
    @classmethod
    def _urls(cls, replicas: list[str]) -> list[str]:
        return [_check_base_url(url) for url in replicas]

    @model_validator(mode="after")
    def _kv_events(self) -> UpstreamConfig:
        if self.balance != "kv_events":
            return self
        if self.kv_events.tokenizer is None:
            raise ValueError("balance kv_events needs kv_events.tokenizer: the model's folder (tokenizer and chat "
                             "template), to match prompts with the blocks the engines report")
        if self.kv_events.endpoints and len(self.kv_events.endpoints) != len(self.replicas):
            raise ValueError(f"kv_events.endpoints names {len(self.kv_events.endpoints)} sockets for "
                             f"{len(self.replicas)} replicas: one per replica, in order, or none to ask each replica")
        return self


class PoolConfig(UpstreamConfig):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """unique; letters, digits, `_ . -`"""
    replicas: list[str] = Field(default_factory=list, json_schema_extra={"shown_default": "required"})
    """base URLs such as `http://10.0.0.5:8000/v1`; none for `kind: litellm`"""
    kind: Literal["openai", "litellm"] = "openai"
    """`litellm`: the pool has no `replicas`; its requests go through litellm's async completion API to any provider
    litellm supports (install `prefixgate[providers]`). Answers are turned back into OpenAI's JSON and SSE framing;
    provider 4xx keep their status, other failures are 502 `provider_error`. vLLM-only fields (`cache_salt`) are not
    sent. Such a pool serves only the `models` it lists, and is the usual `overflow_to` target"""
    litellm_model: str | None = Field(None, json_schema_extra={"shown_default": "the request's model"})
    """with `kind: litellm`: the provider/model string litellm calls, e.g. `anthropic/claude-3-5-haiku-latest` or
    `openai/gpt-4o-mini`"""
    api_base: str | None = Field(None, json_schema_extra={"shown_default": "provider default"})
    """with `kind: litellm`: the provider's base URL (`api_key` is the provider key)"""
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
    requests go to the less loaded of this pool and the long pool, as one pool. A short answer in the long pool waits
    behind long ones, so when more than one in twenty land there the split makes short answers' p95 worse than one
    pool (docs/benchmarks.md). `prefixgate_length_short_recall` and `prefixgate_length_split` show the state.
    0: always split. With `continue_long` it applies only to the requests that may not be cut"""
    continue_long: bool = False
    """with `output: short`: start short, continue long. A plain-text answer (no tools, `response_format`, guided
    decoding, `n` > 1, `logprobs`, `echo` or `best_of`) starts in this pool with its output capped at
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
    """backpressure: most requests in flight per replica (the pool's cap is this times its replicas); past it requests
    wait in the pool's queue. None: no cap, no queue"""
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

    @model_validator(mode="after")
    def _kind_fields(self) -> PoolConfig:
        if self.kind == "openai" and not self.replicas:
            raise ValueError(f"pool '{self.name}' needs replicas (base URLs such as http://127.0.0.1:8000/v1)")
        if self.kind == "litellm" and self.replicas:
            raise ValueError(f"pool '{self.name}' is of kind litellm: give api_base instead of replicas")
        if self.kind == "openai" and (self.litellm_model or self.api_base):
            raise ValueError(f"pool '{self.name}': litellm_model and api_base are for kind litellm")
        return self
