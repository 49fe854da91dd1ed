"""The soak bench (tests/bench/soak.py) for one minute, as CI runs it: a real `prefixgate serve`
under 30 requests a second of mixed traffic. Memory is reported, not judged here (the ten-minute
bench holds the 5 % target; one minute on a shared CI machine is too short for it): what must hold
even in a minute is that nothing is lost, nothing is left in flight and no descriptor leaks."""

from __future__ import annotations

from pathlib import Path

from tests.bench.soak import soak, table


def test_a_minute_of_mixed_traffic_loses_nothing_and_leaks_no_descriptors(tmp_path: Path) -> None:
    report = soak(60, 30, tmp_path)
    print(table(report, 1))
    growth = report.growth()
    assert report.sent >= 1700 and report.lost == 0, report.lost_examples
    assert report.in_flight_after == 0
    gone = sum(report.by_kind["gone"].values())
    assert report.upstream_aborts == gone  # each client that left had its upstream request aborted
    assert growth["fds_at_end"] <= growth["fds_after_warmup"] + 4
    assert growth["rss_growth_pct"] < 25  # a gross leak only (a request's worth of garbage per request)
