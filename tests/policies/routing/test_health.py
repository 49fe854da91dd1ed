from __future__ import annotations

from policies.routing.health import HEALTHY, EjectionRules, after_failure, after_success, usable

RULES = EjectionRules(eject_after=3, backoff=1.0, max_backoff=4.0)


def test_ejected_only_after_consecutive_failures() -> None:
    state = HEALTHY
    for _ in range(2):
        state = after_failure(state, 100.0, RULES)
        assert usable(state, 100.0, in_flight=5)
    state = after_failure(state, 100.0, RULES)
    assert not usable(state, 100.0, in_flight=0)
    assert not usable(state, 100.9, in_flight=0)


def test_a_success_in_between_resets_the_count() -> None:
    state = after_failure(after_failure(HEALTHY, 0.0, RULES), 0.0, RULES)
    state = after_failure(after_success(state), 0.0, RULES)
    assert usable(state, 0.0, in_flight=0) and state.failures == 1


def test_half_open_takes_one_request_at_a_time_then_closes_on_success() -> None:
    state = HEALTHY
    for _ in range(3):
        state = after_failure(state, 10.0, RULES)
    assert usable(state, 11.0, in_flight=0)  # back-off over: one probe request
    assert not usable(state, 11.0, in_flight=1)  # while it runs, nothing else
    state = after_success(state)
    assert state is HEALTHY and usable(state, 11.0, in_flight=9)


def test_each_failed_probe_doubles_the_backoff_up_to_the_cap() -> None:
    state = HEALTHY
    for _ in range(3):
        state = after_failure(state, 0.0, RULES)
    lengths = [state.backoff]
    now = 0.0
    for _ in range(4):
        now = state.ejected_until
        state = after_failure(state, now, RULES)  # the half-open probe fails: ejected again at once
        assert not usable(state, now, in_flight=0)
        lengths.append(state.backoff)
    assert lengths == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_failed_health_check_ejects_at_once() -> None:
    state = after_failure(HEALTHY, 5.0, RULES, at_once=True)
    assert not usable(state, 5.5, in_flight=0)
    assert usable(state, 6.0, in_flight=0)
