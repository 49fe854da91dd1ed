"""The length-prediction workload (tests/bench/length_workload.py) is fair to the predictor it measures:
the same seed gives the same requests, the body the gateway reads never holds the true length, the
drifting apps really change halfway, and the decisive workload's apps never straddle the threshold."""

from __future__ import annotations

from statistics import median

import pytest

from policies.admission.length import DECISIVE, DECISIVE_MARGIN
from proxy.admission.rate_limiter import MemoryLimiter
from proxy.admission.request_admission import Admission
from proxy.admission.token_count import TokenCounter
from proxy.clock import SYSTEM_CLOCK
from proxy.config.pools import OpenAIPoolConfig
from proxy.observability.metrics import Metrics
from tests.bench.decisive_templates import score
from tests.bench.length_prediction import admitted_body
from tests.bench.length_workload import (
    DECISIVE_APPS,
    LONG_LEAST,
    SHORT_MOST,
    TRUTH_FIELDS,
    LengthRequest,
    engine_body,
    workload,
)

REQUESTS = 600


THRESHOLD: int = OpenAIPoolConfig.model_fields["short_threshold"].default


@pytest.mark.parametrize("kind", ["mixed", "decisive"])
def test_the_same_seed_gives_the_same_requests(kind: str) -> None:
    assert workload(7, REQUESTS, kind) == workload(7, REQUESTS, kind)
    assert workload(7, REQUESTS, kind) != workload(8, REQUESTS, kind)
    assert workload(7, REQUESTS) == workload(7, REQUESTS, "mixed")  # the default: the results before it compare


@pytest.mark.parametrize("kind", ["mixed", "decisive"])
def test_the_predictor_reads_the_clients_body_and_only_the_engine_copy_holds_the_truth(kind: str) -> None:
    admission = Admission(MemoryLimiter(SYSTEM_CLOCK), TokenCounter(), Metrics(), predicts=True)
    for request in workload(3, REQUESTS, kind):
        admitted, seen = admitted_body(admission, request)
        assert seen == request.body and TRUTH_FIELDS.isdisjoint(seen) and TRUTH_FIELDS.isdisjoint(admitted.body)
        engine = engine_body(request)
        assert engine["max_tokens"] == engine["min_tokens"] == request.true_tokens and engine["ignore_eos"]
        assert {key: engine[key] for key in request.body if key != "max_tokens"} == {
            key: value for key, value in request.body.items() if key != "max_tokens"}
        cap = request.body.get("max_tokens")
        assert cap is None or request.true_tokens <= cap


def test_a_body_that_leaks_the_truth_stops_the_bench() -> None:
    admission = Admission(MemoryLimiter(SYSTEM_CLOCK), TokenCounter(), Metrics(), predicts=True)
    honest = workload(3, 1)[0]
    leaky = LengthRequest(honest.tenant, honest.app, engine_body(honest), honest.true_tokens, False, honest.kind)
    with pytest.raises(AssertionError, match="carries"):
        admitted_body(admission, leaky)


@pytest.mark.parametrize(("app", "before", "after"), [("globex/summarize", (100, 200), (500, 800)),
                                                      ("initech/codegen", (600, 1300), (80, 200))])
def test_drift_changes_the_apps_lengths_at_the_midpoint(app: str, before: tuple[int, int],
                                                        after: tuple[int, int]) -> None:
    requests = workload(5, REQUESTS)
    halves = requests[:REQUESTS // 2], requests[REQUESTS // 2:]
    assert not any(r.drifted for r in halves[0]) and all(r.drifted for r in halves[1] if r.app == app)
    for half, (low, high) in zip(halves, (before, after), strict=True):
        lengths = [r.true_tokens for r in half if r.app == app]
        assert len(lengths) >= 20 and low <= median(lengths) <= high
        assert len({r.body["messages"][0]["content"] for r in half if r.app == app}) == 1  # the same template


def test_the_decisive_apps_never_straddle_the_threshold_and_the_gateways_rule_places_them() -> None:
    """Each app's answers all lie a margin to one side of the default threshold, none sends max_tokens, short
    answers are the majority as in the mixed workload, and, keyed as the gateway keys them, every template is
    decided from its ninth request on, always on the side it answers."""
    assert SHORT_MOST * DECISIVE_MARGIN <= THRESHOLD and LONG_LEAST >= THRESHOLD * DECISIVE_MARGIN
    requests = workload(11, 3000, "decisive")
    sides = {f"{app.tenant}/{app.name}": app.side for app in DECISIVE_APPS}
    assert {r.app for r in requests} == set(sides)
    for app, side in sides.items():
        lengths = [r.true_tokens for r in requests if r.app == app]
        assert max(lengths) <= SHORT_MOST if side == "short" else min(lengths) >= LONG_LEAST
    assert not any("max_tokens" in r.body or "max_completion_tokens" in r.body for r in requests)
    assert 0.65 <= sum(r.true_tokens <= THRESHOLD for r in requests) / len(requests) <= 0.85
    shipped = score(requests)[f"{DECISIVE}/{DECISIVE_MARGIN:g}"]
    assert shipped["same_side"] == 1.0 and shipped["long_in_short"] == shipped["short_in_long"] == 0
    assert shipped["decided"] == (len(requests) - DECISIVE * len(sides)) / len(requests)
