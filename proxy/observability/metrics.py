"""Prometheus metrics, one registry per app (no module globals), label children cached; in one
process kept as plain tallies, with several workers summed over all of them (``render_all_workers``)."""

from __future__ import annotations

import asyncio
import os

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import mark_process_dead

from proxy.observability.connection_metrics import ConnectionMetrics
from proxy.observability.load_metrics import LoadCollector, LoadGauges, LoadSamples
from proxy.observability.metric_families import (
    ContinuationFamilies,
    PromptFamilies,
    RoutingFamilies,
    TrafficFamilies,
)
from proxy.observability.tallies import LOCAL_KINDS, SHARED_KINDS, CounterChild, HistogramChild
from proxy.observability.worker_metrics import forget_dead_workers, multiprocess_dir, render_all_workers

OTHER_TENANTS = "other"  # the tenant label of every tenant past the labelled ones


class Metrics:
    """Tenant labels are bounded: only the tenants named by ``label_tenants`` get their own label
    value; the rest count as ``other``, so a thousand keys cannot make a thousand series."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._labelled: frozenset[str] = frozenset()
        self._folder = multiprocess_dir()  # set when this process is one of several workers
        kinds = LOCAL_KINDS if self._folder is None else SHARED_KINDS
        self._traffic = TrafficFamilies.register(self.registry, kinds)
        self._routing = RoutingFamilies.register(self.registry, kinds)
        self._continuation = ContinuationFamilies.register(self.registry, kinds)
        self._prompt = PromptFamilies.register(self.registry, kinds)
        self.load: LoadCollector | LoadGauges
        if self._folder is None:
            self.load = LoadCollector()
            self.registry.register(self.load)
        else:
            self.load = LoadGauges()
        self._publisher: asyncio.Task[None] | None = None
        self._children: dict[tuple[str, ...], tuple[CounterChild, HistogramChild]] = {}
        self._answer_children: dict[tuple[str, str], tuple[CounterChild, CounterChild, HistogramChild]] = {}
        self._stage_children: dict[str, HistogramChild] = {}
        self._tenant_children: dict[str, tuple[HistogramChild, HistogramChild, CounterChild]] = {}
        self._ttft_children: dict[str, HistogramChild] = {}
        self._choice_children: dict[tuple[str, ...], CounterChild] = {}
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
            children = (self._traffic.requests.labels(*key), self._traffic.duration.labels(route, key[3]))
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def observe_answer(self, tenant: str, pool: str, prompt: int | None, completion: int | None,
                       stream_seconds: float | None) -> None:
        """Tokens of an answered request and, for a stream, its time per output token."""
        key = (tenant, pool)
        children = self._answer_children.get(key)
        if children is None:
            tokens = self._traffic.tokens
            children = (tokens.labels(tenant, pool, "prompt"), tokens.labels(tenant, pool, "completion"),
                        self._traffic.tpot.labels(pool))
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
            child = self._stage_children[stage] = self._traffic.stage.labels(stage)
        child.observe(seconds)

    def observe_ttft(self, route: str, seconds: float) -> None:
        child = self._ttft_children.get(route)
        if child is None:
            child = self._ttft_children[route] = self._traffic.ttft.labels(route)
        child.observe(seconds)

    def pool_chosen(self, pool: str, reason: str) -> None:
        child = self._choice_children.get((pool, reason))
        if child is None:
            child = self._choice_children[pool, reason] = self._routing.pool_choices.labels(pool, reason)
        child.inc()

    def replica_chosen(self, pool: str, replica: str, reason: str) -> None:
        child = self._choice_children.get((pool, replica, reason))
        if child is None:
            child = self._routing.replica_choices.labels(pool, replica, reason)
            self._choice_children[pool, replica, reason] = child
        child.inc()

    def observe_prompt(self, tenant: str, stable_tokens: int, stable_ratio: float, moved: int) -> None:
        tenant = self.tenant_label(tenant)
        children = self._tenant_children.get(tenant)
        if children is None:
            prompt = self._prompt
            children = self._tenant_children[tenant] = (
                prompt.stable_tokens.labels(tenant), prompt.stable_ratio.labels(tenant), prompt.moved.labels(tenant))
        children[0].observe(stable_tokens)
        children[1].observe(stable_ratio)
        if moved:
            children[2].inc(moved)

    def observe_retrieval(self, stages: dict[str, float]) -> None:
        for stage, seconds in stages.items():
            self.observe_stage(stage, seconds)

    def observe_embedding_batch(self, size: int) -> None:
        self._prompt.embedding_batch.observe(size)

    def retrieval_cache(self, result: str) -> None:
        self._prompt.retrieval_cache.labels(result).inc()

    def embedding_cache(self, result: str) -> None:
        self._prompt.embedding_cache.labels(result).inc()

    def shared_cache(self, cache: str, event: str) -> None:
        self._prompt.shared_cache.labels(cache, event).inc()

    def retrieval_failed(self) -> None:
        self._prompt.retrieval_failures.inc()

    def upstream_error(self, pool: str, replica: str, kind: str) -> None:
        self._traffic.upstream_errors.labels(pool, replica, kind).inc()

    def upstream_retry(self, pool: str) -> None:
        self._traffic.upstream_retries.labels(pool).inc()

    def rate_limited(self, tenant: str, limit: str) -> None:
        self._routing.rate_limited.labels(self.tenant_label(tenant), limit).inc()

    def limiter_unavailable(self, action: str) -> None:
        self._routing.limiter_unavailable.labels(action).inc()

    def admission_clamped(self, tenant: str) -> None:
        self._routing.clamped.labels(self.tenant_label(tenant)).inc()

    def output_clamped(self, pool: str, tenant: str) -> None:
        """A request's output cap lowered to fit ``pool``'s context (``fit_output``), once per plan for a pool."""
        self._routing.output_clamped.labels(pool, self.tenant_label(tenant)).inc()

    def observe_length(self, pool: str, tenant: str, step: str, predicted_p90: int, actual: int) -> None:
        self._routing.output_tokens.labels(pool, "predicted_p90").observe(predicted_p90)
        self._routing.output_tokens.labels(pool, "actual").observe(actual)
        outcome = "within" if actual <= predicted_p90 else "above"
        self._routing.predictions.labels(pool, self.tenant_label(tenant), step, outcome).inc()

    def held_at_choice(self, pool: str, tokens: int) -> None:
        self._routing.held_tokens.labels(pool).observe(tokens)

    def continued(self, pool: str, tenant: str, seam: float | None, prefilled: int | None) -> None:
        """An answer went on in the long pool ``pool``: the seam's gap and the prompt tokens sent again."""
        self._continuation.continued.labels(pool, self.tenant_label(tenant)).inc()
        if seam is not None:
            self._continuation.seam.labels(pool).observe(seam)
        if prefilled is not None:
            self._continuation.prefilled_again.labels(pool).inc(prefilled)

    def shed(self, pool: str, reason: str) -> None:
        self._routing.shed.labels(pool, reason).inc()

    def observe_queue_wait(self, pool: str, seconds: float) -> None:
        self._routing.queue_wait.labels(pool).observe(seconds)

    def attach(self, samples: LoadSamples) -> None:
        """Report the load the pools give by ``samples``; as one of several workers, publish it once a second."""
        self.load.samples = samples
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
        if isinstance(self.load, LoadGauges):  # always, with a folder: this worker's load, fresh
            self.load.publish()
        return render_all_workers(self._folder)
