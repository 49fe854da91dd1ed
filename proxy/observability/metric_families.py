"""The metric families of a gateway's registry, declared in groups; ``Metrics`` observes into them.
Each group is made with the ``MetricKinds`` the process wants (plain tallies, or memory-mapped values
shared by several workers)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from policies.refusals import OVERFLOWED, ShedReason
from policies.routing.pool_choice import PoolReason
from policies.routing.replica import ReplicaReason
from policies.vocabulary import Vocabulary
from proxy.observability.tallies import CounterFamily, HistogramFamily, MetricKinds
from proxy.transports.base import ErrorKind
from proxy.wire.headers import OUTPUT_CLAMPED

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
PREFIX_TOKEN_BUCKETS = (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
HELD_TOKEN_BUCKETS = (0, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
OUTPUT_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
RATIO_BUCKETS = (0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60)


def spelled_out(vocabulary: type[Vocabulary]) -> str:
    """A label's values and what each means, for a family's help, from the vocabulary that declares them
    (``ReplicaReason`` and the like), so the help names every value the code may count and no other."""
    return "; ".join(f"{word}: {word.meaning}" for word in vocabulary)


@dataclass(frozen=True, slots=True)
class TrafficFamilies:
    """Requests and answers: counts, durations, stages, tokens, time to first token, upstream failures."""

    requests: CounterFamily
    tokens: CounterFamily
    tpot: HistogramFamily
    stage: HistogramFamily
    duration: HistogramFamily
    ttft: HistogramFamily
    upstream_errors: CounterFamily
    upstream_retries: CounterFamily

    @classmethod
    def register(cls, registry: CollectorRegistry, kinds: MetricKinds) -> TrafficFamilies:
        return cls(
            requests=kinds.counter(
                "prefixgate_requests", "Requests answered, by route, tenant, pool (none: refused before one "
                "was chosen) and HTTP status (499: the client left).",
                ["route", "tenant", "pool", "status"], registry=registry,
            ),
            tokens=kinds.counter(
                "prefixgate_tokens", "Tokens of answered requests by tenant, pool and kind (prompt, completion), "
                "from the engine's usage (asked for on every stream); events are counted where an upstream sends none.",
                ["tenant", "pool", "kind"], registry=registry,
            ),
            tpot=kinds.histogram(
                "prefixgate_time_per_output_token_seconds",
                "Streamed answers: time from the first chunk to the last over completion tokens after the first.",
                ["pool"], buckets=TPOT_BUCKETS, registry=registry,
            ),
            stage=kinds.histogram(
                "prefixgate_stage_seconds", "Time per request stage: auth (API key to tenant), request (body read, "
                "validation), canonicalize (prompt rewrite), admission (limits), upstream (replica taken to last "
                "byte); "
                "retrieval's embed, search and select; the queue is prefixgate_queue_wait_seconds.",
                ["stage"], buckets=LATENCY_BUCKETS, registry=registry,
            ),
            duration=kinds.histogram(
                "prefixgate_request_duration_seconds",
                "Time from request arrival to the last byte sent, by route and status.",
                ["route", "status"], buckets=LATENCY_BUCKETS, registry=registry,
            ),
            ttft=kinds.histogram(
                "prefixgate_time_to_first_token_seconds",
                "Time from request arrival to the first streamed chunk relayed to the client.",
                ["route"], buckets=TTFT_BUCKETS, registry=registry,
            ),
            upstream_errors=kinds.counter(
                "prefixgate_upstream_errors", "Failed upstream exchanges, by pool, replica and kind ("
                f"{spelled_out(ErrorKind)}).",
                ["pool", "replica", "kind"], registry=registry,
            ),
            upstream_retries=kinds.counter(
                "prefixgate_upstream_retries", "Requests tried again on another replica, by pool.",
                ["pool"], registry=registry,
            ),
        )


@dataclass(frozen=True, slots=True)
class RoutingFamilies:
    """Where requests went and what held them back: pool and replica choices, queues, shedding, rate
    limits, length predictions."""

    shed: CounterFamily
    queue_wait: HistogramFamily
    pool_choices: CounterFamily
    replica_choices: CounterFamily
    rate_limited: CounterFamily
    limiter_unavailable: CounterFamily
    clamped: CounterFamily
    output_clamped: CounterFamily
    output_tokens: HistogramFamily
    predictions: CounterFamily
    held_tokens: HistogramFamily

    @classmethod
    def register(cls, registry: CollectorRegistry, kinds: MetricKinds) -> RoutingFamilies:
        return cls(
            shed=kinds.counter(
                "prefixgate_shed", "Requests a pool turned away before any engine work, by pool and reason ("
                f"{spelled_out(ShedReason)}); each as REASON{OVERFLOWED} where the pool's overflow_to took the "
                "request instead.",
                ["pool", "reason"], registry=registry,
            ),
            queue_wait=kinds.histogram(
                "prefixgate_queue_wait_seconds", "Time requests to a pool with max_in_flight waited for a slot.",
                ["pool"], buckets=LATENCY_BUCKETS, registry=registry,
            ),
            pool_choices=kinds.counter(
                "prefixgate_pool_choices", "Requests by the pool that took them and why ("
                f"{spelled_out(PoolReason)}).",
                ["pool", "reason"], registry=registry,
            ),
            replica_choices=kinds.counter(
                "prefixgate_replica_choices", "Requests by the replica chosen and why ("
                f"{spelled_out(ReplicaReason)}); retries are prefixgate_upstream_retries.",
                ["pool", "replica", "reason"], registry=registry,
            ),
            rate_limited=kinds.counter(
                "prefixgate_rate_limited", "Requests refused by a tenant rate limit, by tenant and limit "
                "(requests, tokens, too_large: the request alone exceeds the token limit).",
                ["tenant", "limit"], registry=registry,
            ),
            limiter_unavailable=kinds.counter(
                "prefixgate_limiter_unavailable", "Requests whose rate limits Redis could not check, by what was done "
                "(local: limited by this process alone; refused: answered 503, redis.limits_when_down).",
                ["action"], registry=registry,
            ),
            clamped=kinds.counter(
                "prefixgate_admission_adjusted", "Requests whose max_tokens admission set or clamped, by tenant.",
                ["tenant"], registry=registry,
            ),
            output_clamped=kinds.counter(
                "prefixgate_output_clamped", "Requests whose output cap was lowered to what the pool's engine context "
                f"holds after the prompt ({OUTPUT_CLAMPED.decode()}), by the pool planned for and tenant.",
                ["pool", "tenant"], registry=registry,
            ),
            output_tokens=kinds.histogram(
                "prefixgate_output_tokens", "Completion tokens per request by pool: predicted p90 and actual.",
                ["pool", "kind"], buckets=OUTPUT_TOKEN_BUCKETS, registry=registry,
            ),
            predictions=kinds.counter(
                "prefixgate_length_predictions", "Answers at or below their predicted p90 length (within) or above it, "
                "by pool, tenant and step (turn, after-tool: an agent's request carrying a tool's result, prompt: "
                "a completion).", ["pool", "tenant", "step", "outcome"], registry=registry,
            ),
            held_tokens=kinds.histogram(
                "prefixgate_kv_held_tokens", "Prompt tokens the chosen replica's engine held when it was chosen "
                "(balance kv_events; 0: none held there).", ["pool"], buckets=HELD_TOKEN_BUCKETS, registry=registry,
            ),
        )


@dataclass(frozen=True, slots=True)
class PromptFamilies:
    """The prompt's stable prefix, and retrieval with its caches."""

    stable_tokens: HistogramFamily
    stable_ratio: HistogramFamily
    moved: CounterFamily
    embedding_batch: HistogramFamily
    retrieval_cache: CounterFamily
    embedding_cache: CounterFamily
    retrieval_failures: CounterFamily
    shared_cache: CounterFamily

    @classmethod
    def register(cls, registry: CollectorRegistry, kinds: MetricKinds) -> PromptFamilies:
        return cls(
            stable_tokens=kinds.histogram(
                "prefixgate_stable_prefix_tokens",
                "Estimated tokens (4 characters each) at the start of a prompt, after the rewrite, that equal "
                "the start of the same tenant's previous prompt: what the engine's prefix cache can reuse.",
                ["tenant"], buckets=PREFIX_TOKEN_BUCKETS, registry=registry,
            ),
            stable_ratio=kinds.histogram(
                "prefixgate_stable_prefix_ratio",
                "Share of a prompt's characters, after the rewrite, that repeat the tenant's previous prompt.",
                ["tenant"], buckets=RATIO_BUCKETS, registry=registry,
            ),
            moved=kinds.counter(
                "prefixgate_volatile_spans_moved", "Volatile spans taken out of prompt prefixes, by tenant.",
                ["tenant"], registry=registry,
            ),
            embedding_batch=kinds.histogram(
                "prefixgate_embedding_batch_size", "Questions per embedding call after micro-batching.",
                buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=registry,
            ),
            retrieval_cache=kinds.counter(
                "prefixgate_retrieval_cache",
                "Retrievals answered from the passage cache (hit), by one already running (joined) or computed (miss).",
                ["result"], registry=registry,
            ),
            embedding_cache=kinds.counter(
                "prefixgate_embedding_cache", "Question vectors found in the per-process vector cache (hit) or "
                "computed (miss); asked only when the passage cache had no answer.",
                ["result"], registry=registry,
            ),
            retrieval_failures=kinds.counter(
                "prefixgate_retrieval_failures", "Requests that went on without context because retrieval failed.",
                registry=registry,
            ),
            shared_cache=kinds.counter(
                "prefixgate_shared_cache",
                "Redis-backed caches: reads Redis answered (shared_hit), failed calls (error).",
                ["cache", "event"], registry=registry,
            ),
        )


@dataclass(frozen=True, slots=True)
class ContinuationFamilies:
    """Answers cut in a short pool and continued in the long pool (``continue_long``): how many, the seam's
    gap, the prompt tokens sent again."""

    continued: CounterFamily
    seam: HistogramFamily
    prefilled_again: CounterFamily

    @classmethod
    def register(cls, registry: CollectorRegistry, kinds: MetricKinds) -> ContinuationFamilies:
        return cls(
        continued=kinds.counter(
            "prefixgate_continued", "Answers a short pool's engine cut at its threshold and the long pool "
            "continued (continue_long), by the long pool and tenant.", ["pool", "tenant"], registry=registry,
        ),
        seam=kinds.histogram(
            "prefixgate_continuation_seam_seconds", "From the short leg's last token to the long leg's first, "
            "of continued answers, by the long pool.", ["pool"], buckets=LATENCY_BUCKETS, registry=registry,
        ),
        prefilled_again=kinds.counter(
            "prefixgate_continuation_prefill_tokens", "Prompt tokens the long pool's engines were sent to "
            "continue answers (the prompt and the short leg's text; what their prefix caches held included).",
            ["pool"], registry=registry,
        ),
        )
