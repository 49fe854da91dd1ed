"""The wait queue's fairness: shares, turns, and a greedy tenant giving way."""

from __future__ import annotations

from policies.admission.fair_queue import FairQueue


def test_a_lone_tenant_may_fill_the_queue_but_not_past_its_bound() -> None:
    queue: FairQueue[int] = FairQueue(4)
    for item in range(4):
        assert queue.can_take("a")
        queue.push("a", item)
    assert not queue.can_take("a") and queue.make_room("a") is None


def test_a_newcomer_takes_the_places_of_the_greedy_tenants_newest_waiters() -> None:
    queue: FairQueue[str] = FairQueue(4)
    for item in ("a1", "a2", "a3", "a4"):
        queue.push("a", item)
    assert not queue.can_take("b")
    assert queue.make_room("b") == "a4"
    queue.push("b", "b1")
    assert queue.make_room("b") == "a3"
    queue.push("b", "b2")
    assert queue.make_room("b") is None  # b holds its share (2 of 4): no more
    assert queue.size == 4


def test_freed_slots_go_to_tenants_in_turn_first_come_first_served_within_one() -> None:
    queue: FairQueue[str] = FairQueue(10)
    for tenant, item in [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"), ("b", "b2")]:
        queue.push(tenant, item)
    assert [queue.pop() for _ in range(7)] == ["a1", "b1", "c1", "a2", "b2", "a3", None]


def test_a_waiter_that_left_is_removed() -> None:
    queue: FairQueue[str] = FairQueue(3)
    queue.push("a", "a1")
    queue.push("a", "a2")
    assert queue.remove("a", "a1") and not queue.remove("a", "a1") and not queue.remove("b", "x")
    assert queue.size == 1 and queue.pop() == "a2" and queue.size == 0
