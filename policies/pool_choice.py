"""Which pool serves a request, and why.

The reasons are the ``reason`` label of ``prefixgate_pool_choices_total``: ``named`` (the client
named it in x-prefixgate-pool), ``length`` (among the pools that serve the model, by the predicted
output length), ``merged`` (a short pool whose split does not pay now, see ``split_pays``, and its long
pool taken as one: the less loaded of the two), ``model`` (the first pool that serves the model, else the
first that takes any).
The embeddings upstream takes embeddings requests for the models it serves or, knowing none,
all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, TypeVar

from policies.length import PoolOption, choose_by_length
from policies.refusals import ModelNotInPool, UnknownModel, UnknownPool

PoolReason = Literal["named", "length", "merged", "model"]


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


P = TypeVar("P", bound=Servable)


def choose_pool(
    pools: Sequence[P], model: str, *, by_name: Mapping[str, P], embeddings: P | None = None,
    named: str | None = None, predicted_p90: int | None = None, routes_by_length: bool = False,
) -> tuple[P, PoolReason] | UnknownModel | UnknownPool | ModelNotInPool:
    """The pool for a request to ``model`` and why, or the refusal. ``embeddings``: the embeddings
    upstream, for an embeddings request; ``named``: the pool the client named."""
    if embeddings is not None and (embeddings.serves(model) or embeddings.catch_all):
        return embeddings, "model"
    if named is not None:
        pool = by_name.get(named)
        if pool is None:
            return UnknownPool(named, tuple(by_name))
        if not (pool.serves(model) or pool.catch_all):
            return ModelNotInPool(named, model)
        return pool, "named"
    if predicted_p90 is not None and routes_by_length:
        serving = [pool for pool in pools if pool.serves(model)] or [pool for pool in pools if pool.catch_all]
        if serving:
            return _by_length(serving, by_name, predicted_p90)
    for pool in pools:  # the common case: no list built per request
        if pool.serves(model):
            return pool, "model"
    for pool in pools:
        if pool.catch_all:
            return pool, "model"
    return UnknownModel(model)


def _by_length(serving: Sequence[P], by_name: Mapping[str, P], predicted_p90: int) -> tuple[P, PoolReason]:
    short = next((pool for pool in serving if pool.option.kind == "short"), None)
    if short is not None and not short.splits:
        other = next((pool for pool in serving if pool.option.kind != "short"), None)
        if other is not None:
            return (short if short.load <= other.load else other), "merged"
    return by_name[choose_by_length([pool.option for pool in serving], predicted_p90).name], "length"
