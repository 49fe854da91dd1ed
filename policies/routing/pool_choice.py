"""Which pool serves a request, and why (``PoolReason``).

The embeddings upstream takes embeddings requests for the models it serves or, knowing none,
all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from policies.admission.length import PoolOption, Side, choose_by_length
from policies.refusals import ModelNotInPool, UnknownModel, UnknownPool
from policies.routing.continuation import starts_short
from policies.vocabulary import Vocabulary


class PoolReason(Vocabulary):
    """Why a pool serves a request: the reason ``choose_pool`` gives (all but overflow, which the call gives when the
    chosen pool sheds), the ``reason`` label of prefixgate_pool_choices_total and /admin/route's ``pool_reason``.
    The metric's help, the OpenAPI document and docs/configuration.md are written from it."""

    NAMED = "named", "the client named it in x-prefixgate-pool"
    LENGTH = "length", "among the pools that serve the model, by the predicted output length"
    START_SHORT = "start_short", ("a short pool that continues long, for an answer that may be cut there and whose "
                                  "template's history does not rule a short answer out")
    HISTORY = "history", ("its template's last answers all fell well to one side of the short pool's threshold: the "
                          "pool for that side, whatever the split's recall")
    MERGED = "merged", ("a short pool whose split does not pay now and its long pool taken as one: the less loaded of "
                        "the two (also for a template decided short while the short pool serves requests so placed)")
    MODEL = "model", "the first pool that serves the model, else the first that takes any"
    OVERFLOW = "overflow", ("the chosen pool shed the request and this is its overflow_to; counted after admission, "
                            "the others before")


class Servable(Protocol):
    """What the choice reads of a pool."""

    name: str
    option: PoolOption

    def serves(self, model: str) -> bool: ...

    @property
    def catch_all(self) -> bool: ...

    @property
    def splits(self) -> bool:
        """A short pool: whether it takes only the answers predicted short now."""
        ...

    @property
    def load(self) -> float:
        """Requests in flight per replica."""
        ...

    @property
    def merged_in_flight(self) -> int:
        """Requests the merge placed in this pool (reason ``merged``) that it serves or queues now."""
        ...


P = TypeVar("P", bound=Servable)


def choose_pool(
    pools: Sequence[P], model: str, *, by_name: Mapping[str, P], embeddings: P | None = None,
    named: str | None = None, predicted_p90: int | None = None, routes_by_length: bool = False,
    short_share: float | None = None, continuable: bool = False, decided: Side | None = None,
) -> tuple[P, PoolReason] | UnknownModel | UnknownPool | ModelNotInPool:
    """The pool for a request to ``model`` and why, or the refusal. ``embeddings``: the embeddings
    upstream, for an embeddings request; ``named``: the pool the client named; ``short_share``: of the
    template's recent answers, the share within a short pool's threshold (None: not known yet);
    ``continuable``: the answer may be cut and continued (``policies.routing.continuation.continuable``);
    ``decided``: the side of the short threshold the template's last answers all fell on (``LengthHistory.decided``),
    which places it whatever the split's recall; but while the merge has requests in the short pool, a template
    decided short is placed by the merge too, not held behind them."""
    if embeddings is not None and (embeddings.serves(model) or embeddings.catch_all):
        return embeddings, PoolReason.MODEL
    if named is not None:
        pool = by_name.get(named)
        if pool is None:
            return UnknownPool(named, tuple(by_name))
        if not (pool.serves(model) or pool.catch_all):
            return ModelNotInPool(named, model)
        return pool, PoolReason.NAMED
    if predicted_p90 is not None and routes_by_length:
        serving = [pool for pool in pools if pool.serves(model)] or [pool for pool in pools if pool.catch_all]
        if serving:
            return _by_length(serving, by_name, predicted_p90, short_share, continuable, decided)
    for pool in pools:  # the common case: no list built per request
        if pool.serves(model):
            return pool, PoolReason.MODEL
    for pool in pools:
        if pool.catch_all:
            return pool, PoolReason.MODEL
    return UnknownModel(model)


def _by_length(serving: Sequence[P], by_name: Mapping[str, P], predicted_p90: int, short_share: float | None,
               continuable: bool, decided: Side | None) -> tuple[P, PoolReason]:
    short = next((pool for pool in serving if pool.option.kind == "short"), None)
    if short is not None and decided is not None:
        long = long_pool(serving, short)
        if long is not None:
            if decided == "long":
                return long, PoolReason.HISTORY
            if short.splits or not short.merged_in_flight:
                return short, PoolReason.HISTORY
            # the merge has sent the short pool answers of unknown length: a short answer held there waits behind
            # them, so it goes where the merge sends it
            return merged(short, long), PoolReason.MERGED
    if short is not None and continuable and short.option.continue_long:
        long = long_pool(serving, short)
        if long is not None:
            if predicted_p90 <= short.option.short_threshold:
                return short, PoolReason.LENGTH
            if starts_short(short_share, short.option.long_when_short_below):
                return short, PoolReason.START_SHORT
            return long, PoolReason.LENGTH
    if short is not None and not short.splits:
        long = long_pool(serving, short)
        if long is not None:
            return merged(short, long), PoolReason.MERGED
    return by_name[choose_by_length([pool.option for pool in serving], predicted_p90).name], PoolReason.LENGTH


def merged(short: P, long: P) -> P:
    """Where the merge sends a request: the less loaded of the two pools, the short one on a tie."""
    return short if short.load <= long.load else long


def long_pool(serving: Sequence[P], short: P) -> P | None:
    """Where ``short``'s answers go on: the first pool serving the same model that is not short."""
    return next((pool for pool in serving if pool.option.kind != "short" and pool is not short), None)
