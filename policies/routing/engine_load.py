"""What a vLLM replica's own /metrics say about it, and the load that other senders put on it.

A gateway process counts the requests it has in flight to each replica; that is the whole load only
while it is the engine's one sender. Behind several uvicorn workers or gateway replicas, or beside
clients that call the engine directly, each process sees its own share. The engine's scheduler
gauges see everything: its running plus waiting requests, less what this process had in flight
when it read them, is the load the others put there, which the replica choice adds to this
process's own count. A reading is a poll interval old at most, and one older than ``max_age``
counts for nothing (the engine may have drained, or died).

Only six of the few hundred samples vLLM exposes are needed: lines are picked by metric name
before prometheus_client's parser reads them, which keeps a poll well under a millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# vLLM's metric name -> EngineSample field; samples of one name (one per engine core, model) add up.
ENGINE_METRICS = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",  # a 0-1 fraction, despite the name
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:num_preemptions_total": "preemptions",
}
_LINE_STARTS = tuple((name + "{").encode() for name in ENGINE_METRICS) + tuple(
    (name + " ").encode() for name in ENGINE_METRICS)


@dataclass(frozen=True, slots=True)
class EngineSample:
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0  # of the engines' KV blocks in use, 0-1 (the mean where several engines add up)
    prefix_hits: float = 0.0  # tokens, since the engine started
    prefix_queries: float = 0.0
    preemptions: float = 0.0


def parse_engine_metrics(text: bytes) -> EngineSample | None:
    """The scheduler and cache figures of a vLLM /metrics page; None when it has no vLLM scheduler
    gauges (the upstream is not vLLM, or an engine of another version)."""
    lines = [line for line in text.splitlines() if line.startswith(_LINE_STARTS)]
    if not lines:
        return None
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(b"\n".join(lines).decode("utf-8", "replace") + "\n"):
        for sample in family.samples:
            field = ENGINE_METRICS.get(sample.name)
            if field is not None:
                sums[field] = sums.get(field, 0.0) + sample.value
                counts[field] = counts.get(field, 0) + 1
    if "running" not in sums and "waiting" not in sums:
        return None
    if counts.get("kv_usage", 0) > 1:
        sums["kv_usage"] /= counts["kv_usage"]
    return EngineSample(**sums)


def hit_rate(before: EngineSample | None, after: EngineSample) -> float | None:
    """Prefix-cache hits over queries between two readings (since the engine started when there
    is no earlier one, or the engine restarted between them); None when nothing was queried."""
    hits, queries = after.prefix_hits, after.prefix_queries
    if before is not None and before.prefix_queries <= queries:
        hits, queries = hits - before.prefix_hits, queries - before.prefix_queries
    return hits / queries if queries > 0 else None


def foreign_load(sample: EngineSample, own_in_flight: int) -> int:
    """Requests at the engine that this process did not send: running plus waiting less its own
    in flight at the reading (the caller counts every request of its own that may have been there
    while the reading was under way, so that a lone gateway never sees its load as someone else's)."""
    return max(0, round(sample.running + sample.waiting) - own_in_flight)


def lasting_load(before: int | None, now: int) -> int:
    """The others' load the replica choice counts: what two readings in a row both saw. A request of
    this process's own that the engine still counts after this process saw its last byte (the
    engine's bookkeeping runs a moment behind its output) reads once as another sender's; real
    load from other senders lasts. Costs one interval of reaction to new load."""
    return 0 if before is None else min(before, now)
