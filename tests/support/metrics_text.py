"""Read a Prometheus text exposition (vLLM's or ours): one value out of it, or every name it exposes."""

from __future__ import annotations

import re

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.waiting import wait_until_async

SUFFIXES = ("", "_total", "_bucket", "_sum", "_count")


def sample_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def wait_for_sample(client: httpx.AsyncClient, origin: str, name: str, value: float, *,
                          timeout: float = 10, **labels: str) -> str:
    """Poll ``origin``'s /metrics until ``name`` (summed over samples with ``labels``) reads ``value``:
    waiting for a state instead of sleeping for a guess at how long it takes. Returns that page."""
    last = ""

    async def page_with_value() -> str | None:
        nonlocal last
        last = (await client.get(origin + "/metrics")).text
        return last if sample_sum(last, name, **labels) == value else None

    return await wait_until_async(page_with_value, timeout=timeout, interval=0.01,
                                  what=f"{name} {labels} to read {value}",
                                  state=lambda: sample_sum(last, name, **labels))


def exposed_names(text: str) -> set[str]:
    """Every sample name a /metrics page has or would have once its labelled children exist."""
    families = re.findall(r"^# TYPE (\S+) \S+$", text, re.MULTILINE)
    return {family.removesuffix("_total") + suffix for family in families for suffix in SUFFIXES}
