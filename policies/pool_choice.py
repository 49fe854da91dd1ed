"""Which pool serves a request, and why.

The reasons are the ``reason`` label of ``prefixgate_pool_choices_total``: ``named`` (the client
named it in x-prefixgate-pool), ``length`` (among the pools that serve the model, by the predicted
output length), ``model`` (the first pool that serves the model, else the first that takes any).
The embeddings upstream takes embeddings requests for the models it serves or, knowing none,
all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, TypeVar

from policies.length import PoolOption, choose_by_length
from policies.refusals import ModelNotInPool, UnknownModel, UnknownPool

PoolReason = Literal["named", "length", "model"]


class Servable(Protocol):
    """What the choice reads of a pool."""

    name: str
    option: PoolOption

    def serves(self, model: str) -> bool: ...

    @property
    def catch_all(self) -> bool: ...


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
            return by_name[choose_by_length([pool.option for pool in serving], predicted_p90).name], "length"
    for pool in pools:  # the common case: no list built per request
        if pool.serves(model):
            return pool, "model"
    for pool in pools:
        if pool.catch_all:
            return pool, "model"
    return UnknownModel(model)
