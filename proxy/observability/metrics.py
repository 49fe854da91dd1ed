"""Prometheus metrics, one registry per app (no module globals), label children cached; with
several workers, summed over all of them (``render_all_workers``)."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import mark_process_dead

from proxy.observability.connection_metrics import ConnectionMetrics
from proxy.observability.load_metrics import LoadCollector, LoadGauges
from proxy.observability.worker_metrics import forget_dead_workers, multiprocess_dir, render_all_workers

if TYPE_CHECKING:
    from proxy.upstream.pools import Upstreams

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
PREFIX_TOKEN_BUCKETS = (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
OUTPUT_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
RATIO_BUCKETS = (0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60)


OTHER_TENANTS = "other"  # the tenant label of every tenant past the labelled ones


class Metrics:
    """Tenant labels are bounded: only the tenants named by ``label_tenants`` get their own label
    value; the rest count as ``other``, so a thousand keys cannot make a thousand series."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._labelled: frozenset[str] = frozenset()
        self._requests = Counter(
            "prefixgate_requests", "Requests answered, by route, tenant, pool (none: refused before one "
            "was chosen) and HTTP status (499: the client left).",
            ["route", "tenant", "pool", "status"], registry=self.registry,
        )
        self._tokens = Counter(
            "prefixgate_tokens", "Tokens of answered requests by tenant, pool and kind (prompt, completion), "
            "from the engine's usage (asked for on every stream); events are counted where an upstream sends none.",
            ["tenant", "pool", "kind"], registry=self.registry,
        )
        self._tpot = Histogram(
            "prefixgate_time_per_output_token_seconds",
            "Streamed answers: time from the first chunk to the last over completion tokens after the first.",
            ["pool"], buckets=TPOT_BUCKETS, registry=self.registry,
        )
        self._stage = Histogram(
            "prefixgate_stage_seconds", "Time per request stage: auth (API key to tenant), request (body read, "
            "validation), canonicalize (prompt rewrite), admission (limits), upstream (replica taken to last byte); "
            "retrieval's embed, search and select; the queue is prefixgate_queue_wait_seconds.",
            ["stage"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self._duration = Histogram(
            "prefixgate_request_duration_seconds",
            "Time from request arrival to the last byte sent, by route and status.",
            ["route", "status"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self._ttft = Histogram(
            "prefixgate_time_to_first_token_seconds",
            "Time from request arrival to the first streamed chunk relayed to the client.",
            ["route"], buckets=TTFT_BUCKETS, registry=self.registry,
        )
        self._upstream_errors = Counter(
            "prefixgate_upstream_errors", "Failed upstream exchanges, by pool, replica and kind (connect, "
            "timeout, broken, status_5xx, ...).",
            ["pool", "replica", "kind"], registry=self.registry,
        )
        self._upstream_retries = Counter(
            "prefixgate_upstream_retries", "Requests tried again on another replica, by pool.",
            ["pool"], registry=self.registry,
        )
        self._stable_tokens = Histogram(
            "prefixgate_stable_prefix_tokens",
            "Estimated tokens (4 characters each) at the start of a prompt, after the rewrite, that equal "
            "the start of the same tenant's previous prompt: what the engine's prefix cache can reuse.",
            ["tenant"], buckets=PREFIX_TOKEN_BUCKETS, registry=self.registry,
        )
        self._stable_ratio = Histogram(
            "prefixgate_stable_prefix_ratio",
            "Share of a prompt's characters, after the rewrite, that repeat the tenant's previous prompt.",
            ["tenant"], buckets=RATIO_BUCKETS, registry=self.registry,
        )
        self._moved = Counter(
            "prefixgate_volatile_spans_moved", "Volatile spans taken out of prompt prefixes, by tenant.",
            ["tenant"], registry=self.registry,
        )
        self._embedding_batch = Histogram(
            "prefixgate_embedding_batch_size", "Questions per embedding call after micro-batching.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=self.registry,
        )
        self._retrieval_cache = Counter(
            "prefixgate_retrieval_cache",
            "Retrievals answered from the passage cache (hit), by one already running (joined) or computed (miss).",
            ["result"], registry=self.registry,
        )
        self._embedding_cache = Counter(
            "prefixgate_embedding_cache", "Question vectors found in the per-process vector cache (hit) or "
            "computed (miss); asked only when the passage cache had no answer.",
            ["result"], registry=self.registry,
        )
        self._retrieval_failures = Counter(
            "prefixgate_retrieval_failures", "Requests that went on without context because retrieval failed.",
            registry=self.registry,
        )
        self._shared_cache = Counter(
            "prefixgate_shared_cache", "Redis-backed caches: reads Redis answered (shared_hit), failed calls (error).",
            ["cache", "event"], registry=self.registry,
        )
        self._rate_limited = Counter(
            "prefixgate_rate_limited", "Requests refused by a tenant rate limit, by tenant and limit "
            "(requests, tokens, too_large: the request alone exceeds the token limit).",
            ["tenant", "limit"], registry=self.registry,
        )
        self._limiter_unavailable = Counter(
            "prefixgate_limiter_unavailable", "Requests whose rate limits Redis could not check, by what was done "
            "(local: limited by this process alone; refused: answered 503, redis.limits_when_down).",
            ["action"], registry=self.registry,
        )
        self._clamped = Counter(
            "prefixgate_admission_adjusted", "Requests whose max_tokens admission set or clamped, by tenant.",
            ["tenant"], registry=self.registry,
        )
        self._output_tokens = Histogram(
            "prefixgate_output_tokens", "Completion tokens per request by pool: predicted p90 and actual.",
            ["pool", "kind"], buckets=OUTPUT_TOKEN_BUCKETS, registry=self.registry,
        )
        self._predictions = Counter(
            "prefixgate_length_predictions", "Answers at or below their predicted p90 length (within) or above it.",
            ["pool", "outcome"], registry=self.registry,
        )
        self._shed = Counter(
            "prefixgate_shed", "Requests a pool turned away before any engine work, by pool and reason "
            "(queue_full, queue_share_exceeded, queue_timeout, no_healthy_upstream).",
            ["pool", "reason"], registry=self.registry,
        )
        self._queue_wait = Histogram(
            "prefixgate_queue_wait_seconds", "Time requests to a pool with max_in_flight waited for a slot.",
            ["pool"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self._pool_choices = Counter(
            "prefixgate_pool_choices", "Requests by the pool that took them and why: model (the first pool "
            "serving the model), length (predicted output length), named (x-prefixgate-pool), overflow (the "
            "chosen pool shed it); the first three are counted before admission.",
            ["pool", "reason"], registry=self.registry,
        )
        self._replica_choices = Counter(
            "prefixgate_replica_choices", "Requests by the replica chosen and why: home (the prompt prefix's "
            "own replica), warm (another replica that served the prefix lately: less loaded than the home, or "
            "the home was over the load bound or ejected), spilled (the home was over the bound or ejected and "
            "this replica had not served the prefix: a cold prefill), least_loaded (no prefix "
            "key), single (the pool's only replica); retries are prefixgate_upstream_retries.",
            ["pool", "replica", "reason"], registry=self.registry,
        )
        self._folder = multiprocess_dir()  # set when this process is one of several workers
        self.load: LoadCollector | LoadGauges
        if self._folder is None:
            self.load = LoadCollector()
            self.registry.register(self.load)
        else:
            self.load = LoadGauges()
        self._publisher: asyncio.Task[None] | None = None
        self._children: dict[tuple[str, ...], tuple[Counter, Histogram]] = {}
        self._answer_children: dict[tuple[str, str], tuple[Counter, Counter, Histogram]] = {}
        self._stage_children: dict[str, Histogram] = {}
        self._tenant_children: dict[str, tuple[Histogram, Histogram, Counter]] = {}
        self._ttft_children: dict[str, Histogram] = {}
        self._choice_children: dict[tuple[str, ...], Counter] = {}
        self.connections = ConnectionMetrics(self.registry)

    def label_tenants(self, tenants: list[str], most: int) -> None:
        """Give these tenants (the first ``most``) their own label value; all others count as other."""
        self._labelled = frozenset(tenants[:most])

    def tenant_label(self, tenant: str) -> str:
        return tenant if tenant in self._labelled else OTHER_TENANTS

    def observe_request(self, route: str, status: int, seconds: float, tenant: str = "none",
                        pool: str = "none") -> None:
        """``tenant``: the tenant's label (tenant_label), or none before authentication."""
        key = (route, tenant, pool, str(status))
        children = self._children.get(key)
        if children is None:
            children = (self._requests.labels(*key), self._duration.labels(route, key[3]))
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def observe_answer(self, tenant: str, pool: str, prompt: int | None, completion: int | None,
                       stream_seconds: float | None) -> None:
        """Tokens of an answered request and, for a stream, its time per output token."""
        key = (tenant, pool)
        children = self._answer_children.get(key)
        if children is None:
            children = (self._tokens.labels(tenant, pool, "prompt"), self._tokens.labels(tenant, pool, "completion"),
                        self._tpot.labels(pool))
            self._answer_children[key] = children
        if prompt:
            children[0].inc(prompt)
        if completion:
            children[1].inc(completion)
            if stream_seconds is not None and completion > 1:
                children[2].observe(stream_seconds / (completion - 1))

    def observe_stage(self, stage: str, seconds: float) -> None:
        child = self._stage_children.get(stage)
        if child is None:
            child = self._stage_children[stage] = self._stage.labels(stage)
        child.observe(seconds)

    def observe_ttft(self, route: str, seconds: float) -> None:
        child = self._ttft_children.get(route)
        if child is None:
            child = self._ttft_children[route] = self._ttft.labels(route)
        child.observe(seconds)

    def pool_chosen(self, pool: str, reason: str) -> None:
        child = self._choice_children.get((pool, reason))
        if child is None:
            child = self._choice_children[pool, reason] = self._pool_choices.labels(pool, reason)
        child.inc()

    def replica_chosen(self, pool: str, replica: str, reason: str) -> None:
        child = self._choice_children.get((pool, replica, reason))
        if child is None:
            child = self._choice_children[pool, replica, reason] = self._replica_choices.labels(pool, replica, reason)
        child.inc()

    def observe_prompt(self, tenant: str, stable_tokens: int, stable_ratio: float, moved: int) -> None:
        tenant = self.tenant_label(tenant)
        children = self._tenant_children.get(tenant)
        if children is None:
            children = self._tenant_children[tenant] = (
                self._stable_tokens.labels(tenant), self._stable_ratio.labels(tenant), self._moved.labels(tenant))
        children[0].observe(stable_tokens)
        children[1].observe(stable_ratio)
        if moved:
            children[2].inc(moved)

    def observe_retrieval(self, stages: dict[str, float]) -> None:
        for stage, seconds in stages.items():
            self.observe_stage(stage, seconds)

    def observe_embedding_batch(self, size: int) -> None:
        self._embedding_batch.observe(size)

    def retrieval_cache(self, result: str) -> None:
        self._retrieval_cache.labels(result).inc()

    def embedding_cache(self, result: str) -> None:
        self._embedding_cache.labels(result).inc()

    def shared_cache(self, cache: str, event: str) -> None:
        self._shared_cache.labels(cache, event).inc()

    def retrieval_failed(self) -> None:
        self._retrieval_failures.inc()

    def upstream_error(self, pool: str, replica: str, kind: str) -> None:
        self._upstream_errors.labels(pool, replica, kind).inc()

    def upstream_retry(self, pool: str) -> None:
        self._upstream_retries.labels(pool).inc()

    def rate_limited(self, tenant: str, limit: str) -> None:
        self._rate_limited.labels(self.tenant_label(tenant), limit).inc()

    def limiter_unavailable(self, action: str) -> None:
        self._limiter_unavailable.labels(action).inc()

    def admission_clamped(self, tenant: str) -> None:
        self._clamped.labels(self.tenant_label(tenant)).inc()

    def observe_length(self, pool: str, predicted_p90: int, actual: int) -> None:
        self._output_tokens.labels(pool, "predicted_p90").observe(predicted_p90)
        self._output_tokens.labels(pool, "actual").observe(actual)
        self._predictions.labels(pool, "within" if actual <= predicted_p90 else "above").inc()

    def shed(self, pool: str, reason: str) -> None:
        self._shed.labels(pool, reason).inc()

    def observe_queue_wait(self, pool: str, seconds: float) -> None:
        self._queue_wait.labels(pool).observe(seconds)

    def attach(self, upstreams: Upstreams) -> None:
        """Report the load of these pools; as one of several workers, publish it once a second."""
        self.load.upstreams = upstreams
        if isinstance(self.load, LoadGauges) and self._folder is not None:
            forget_dead_workers(self._folder)
            self._publisher = asyncio.get_running_loop().create_task(self.load.publish_forever())

    async def aclose(self) -> None:
        if self._publisher is not None:
            self._publisher.cancel()
            await asyncio.gather(self._publisher, return_exceptions=True)
        if self._folder is not None:
            mark_process_dead(os.getpid(), self._folder)  # this worker's load no longer counts

    def render(self) -> bytes:
        if self._folder is None:
            return generate_latest(self.registry)
        self.load.publish()  # type: ignore[union-attr]
        return render_all_workers(self._folder)
