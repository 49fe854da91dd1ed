from __future__ import annotations

from policies.replica import least_loaded


def test_fewest_in_flight_wins() -> None:
    assert least_loaded([3, 1, 2], [True, True, True], start=0) == 1


def test_ties_rotate_with_start() -> None:
    picks = {least_loaded([0, 0, 0], [True, True, True], start=s) for s in range(3)}
    assert picks == {0, 1, 2}


def test_unhealthy_skipped_and_none_when_all_down() -> None:
    assert least_loaded([0, 5], [False, True], start=0) == 1
    assert least_loaded([0, 0], [False, False], start=0) is None
