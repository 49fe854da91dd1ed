"""Which pool serves a request: named, by predicted length, by model; and the refusals when none does."""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.admission.length import PoolOption
from policies.refusals import ModelNotInPool, UnknownModel, UnknownPool
from policies.routing.pool_choice import choose_pool


@dataclass
class FakePool:
    name: str
    models: frozenset[str] = frozenset()
    kind: str = "any"
    threshold: int = 0
    lists_nothing: bool = False  # declares no models and none were discovered: takes any
    splits: bool = True  # a short pool whose split pays
    load: float = 0.0
    merged_in_flight: int = 0  # requests the merge placed in it, in flight
    option: PoolOption = field(init=False)

    def __post_init__(self) -> None:
        self.option = PoolOption(self.name, self.kind, self.threshold)

    def serves(self, model: str) -> bool:
        return model in self.models

    @property
    def catch_all(self) -> bool:
        return self.lists_nothing


SHORT = FakePool("short", frozenset({"m"}), "short", 128)
LONG = FakePool("long", frozenset({"m"}), "long")
OTHER = FakePool("other", frozenset({"x"}))
POOLS = [SHORT, LONG, OTHER]
BY_NAME = {pool.name: pool for pool in POOLS}


def test_the_first_pool_that_serves_the_model_takes_it() -> None:
    assert choose_pool(POOLS, "x", by_name=BY_NAME) == (OTHER, "model")
    assert choose_pool(POOLS, "m", by_name=BY_NAME) == (SHORT, "model")  # no prediction: no length routing


def test_a_prediction_routes_by_length_among_the_pools_that_serve_the_model() -> None:
    assert choose_pool(POOLS, "m", by_name=BY_NAME, predicted_p90=40, routes_by_length=True) == (SHORT, "length")
    assert choose_pool(POOLS, "m", by_name=BY_NAME, predicted_p90=900, routes_by_length=True) == (LONG, "length")


def test_a_named_pool_wins_and_a_wrong_name_is_refused_with_what_exists() -> None:
    assert choose_pool(POOLS, "m", by_name=BY_NAME, named="long", predicted_p90=40,
                       routes_by_length=True) == (LONG, "named")
    assert choose_pool(POOLS, "m", by_name=BY_NAME, named="huge") == UnknownPool("huge", ("short", "long", "other"))
    assert choose_pool(POOLS, "m", by_name=BY_NAME, named="other") == ModelNotInPool("other", "m")


def test_a_model_nothing_serves_is_refused_unless_a_pool_takes_any() -> None:
    assert choose_pool(POOLS, "gpt-9", by_name=BY_NAME) == UnknownModel("gpt-9")
    anything = FakePool("any", lists_nothing=True)
    assert choose_pool([*POOLS, anything], "gpt-9", by_name={**BY_NAME, "any": anything}) == (anything, "model")


def test_the_embeddings_upstream_takes_the_models_it_serves() -> None:
    embedder = FakePool("embeddings", frozenset({"e"}))
    assert choose_pool(POOLS, "e", by_name=BY_NAME, embeddings=embedder) == (embedder, "model")
    assert choose_pool(POOLS, "x", by_name=BY_NAME, embeddings=embedder) == (OTHER, "model")


def test_a_short_pool_whose_split_does_not_pay_takes_requests_with_its_long_pool_as_one() -> None:
    short, long = FakePool("short", frozenset({"m"}), "short", 128, splits=False, load=2), FakePool(
        "long", frozenset({"m"}), "long", load=1)
    pools, by_name = [short, long], {"short": short, "long": long}
    # predicted short or long alike: the less loaded of the two
    assert choose_pool(pools, "m", by_name=by_name, predicted_p90=40, routes_by_length=True) == (long, "merged")
    assert choose_pool(pools, "m", by_name=by_name, predicted_p90=900, routes_by_length=True) == (long, "merged")
    long.load = 3
    assert choose_pool(pools, "m", by_name=by_name, predicted_p90=900, routes_by_length=True) == (short, "merged")
    short.splits = True
    assert choose_pool(pools, "m", by_name=by_name, predicted_p90=900, routes_by_length=True) == (long, "length")
    assert choose_pool(pools, "m", by_name=by_name, predicted_p90=40, routes_by_length=True) == (short, "length")
    # a named pool is the client's word, split or not
    short.splits = False
    assert choose_pool(pools, "m", by_name=by_name, named="short", predicted_p90=900,
                       routes_by_length=True) == (short, "named")


def test_a_decided_template_takes_its_sides_pool_while_the_pools_serve_as_one() -> None:
    merged = FakePool("short", frozenset({"m"}), "short", 128, splits=False, load=5.0)
    pools = [merged, LONG]
    by_name = {pool.name: pool for pool in pools}
    choose = dict(by_name=by_name, routes_by_length=True)
    assert choose_pool(pools, "m", predicted_p90=600, **choose) == (LONG, "merged")  # the less loaded of the two
    assert choose_pool(pools, "m", predicted_p90=600, decided="long", **choose) == (LONG, "history")
    assert choose_pool(pools, "m", predicted_p90=3, decided="short", **choose) == (merged, "history")
    assert choose_pool(POOLS, "m", predicted_p90=40, decided="short", **choose | {"by_name": BY_NAME}) \
        == (SHORT, "history")


def test_a_template_decided_short_is_not_held_behind_the_merges_requests_in_the_short_pool() -> None:
    """While the pools serve as one, the merge may send the short pool answers of any length; a template decided
    short then goes where the merge sends it (the less loaded pool), and back to the short pool once they end."""
    short = FakePool("short", frozenset({"m"}), "short", 128, splits=False, load=1.0, merged_in_flight=1)
    long = FakePool("long", frozenset({"m"}), "long", load=0.5)
    pools = [short, long]
    choose = dict(by_name={pool.name: pool for pool in pools}, routes_by_length=True, predicted_p90=3)
    assert choose_pool(pools, "m", decided="short", **choose) == (long, "merged")
    assert choose_pool(pools, "m", decided="long", **choose) == (long, "history")
    long.load = 2.0
    assert choose_pool(pools, "m", decided="short", **choose) == (short, "merged")  # the less loaded, as merged
    short.merged_in_flight = 0
    assert choose_pool(pools, "m", decided="short", **choose) == (short, "history")
    short.merged_in_flight, short.splits, long.load = 1, True, 0.0  # the split pays: the short pool is short's
    assert choose_pool(pools, "m", decided="short", **choose) == (short, "history")
