"""An upstream of OpenAI-compatible replicas (``UpstreamConfig``): the embeddings upstream, and the replica
fields of a pool of kind ``openai`` (``OpenAIPoolConfig``): their timeouts, health, engine readings, KV events and
balance. Part of the one frozen ``Config``.
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
    reading late: on prefixgate's benchmark, hit rate was lower and TTFT p95 longer; load spread was about the same
    at the median and wider in one pass (docs/tuning.md)"""
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

    replicas: list[str]
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
    as much, the less loaded, and of those as busy each in turn), while that replica's requests in flight stay within
    `kv_events.held_bound` times the pool's mean; a prompt one engine alone holds moves once to the emptier of its
    two ring replicas where that engine holds under 3/4 as many blocks and is no busier (an engine back from a
    restart); a prompt no engine holds within that goes to the emptier of its two replicas on the ring (by the
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
        if not replicas:
            raise ValueError("needs replicas: base URLs such as http://127.0.0.1:8000/v1")
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
