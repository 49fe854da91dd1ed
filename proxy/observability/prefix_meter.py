"""Per tenant, how much of each prompt repeats the one before: the prefix-cache view of traffic."""

from __future__ import annotations

from policies.prompt.stable_prefix import CHARS_PER_TOKEN, Pieces, shared_prefix, total_length
from proxy.observability.metrics import Metrics


class PrefixMeter:
    """Keeps each tenant's previous prompt (one per tenant) and records the shared prefix of the next."""

    __slots__ = ("_previous", "metrics")

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._previous: dict[str, Pieces] = {}

    def observe(self, tenant: str, pieces: Pieces, moved: int) -> None:
        previous = self._previous.get(tenant)
        self._previous[tenant] = pieces
        shared = shared_prefix(previous, pieces) if previous is not None else 0
        total = total_length(pieces)
        self.metrics.observe_prompt(tenant, shared // CHARS_PER_TOKEN, shared / total if total else 0.0, moved)
