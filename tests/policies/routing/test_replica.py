from __future__ import annotations

import pytest

from policies.routing.affinity import HashRing
from policies.routing.replica import least_loaded, pick_replica


def test_fewest_in_flight_wins() -> None:
    assert least_loaded([3, 1, 2], [True, True, True], start=0) == 1


def test_ties_rotate_with_start() -> None:
    picks = {least_loaded([0, 0, 0], [True, True, True], start=s) for s in range(3)}
    assert picks == {0, 1, 2}


def test_unhealthy_skipped_and_none_when_all_down() -> None:
    assert least_loaded([0, 5], [False, True], start=0) == 1
    assert least_loaded([0, 0], [False, False], start=0) is None


RING = HashRing(["http://a/v1", "http://b/v1", "http://c/v1"])
KEY = 12345


def _pick(in_flight: list[int], *, warm: int = 0, healthy: list[bool] | None = None,
          key: int | None = KEY) -> tuple[int, str] | None:
    return pick_replica(in_flight, healthy or [True] * 3, key=key, ring=RING, bound=1.25, home_slack=0, warm=warm,
                        start=0)


def test_a_prompt_goes_home_while_its_home_has_room() -> None:
    assert _pick([0, 0, 0]) == (RING.home(KEY), "home")


def test_a_full_home_sends_the_prompt_where_it_is_warm_else_spills_it() -> None:
    home = RING.home(KEY)
    loads = [0, 0, 0]
    loads[home] = 9
    other = next(i for i in RING.walk(KEY) if i != home)
    assert _pick(loads, warm=1 << other) == (other, "warm")
    index, reason = _pick(loads)  # type: ignore[misc]
    assert index != home and reason == "spilled"


def test_without_a_key_the_least_loaded_takes_it_and_none_when_none_is_healthy() -> None:
    assert _pick([2, 0, 1], key=None) == (1, "least_loaded")
    assert _pick([0, 0, 0], healthy=[False] * 3) is None
    assert _pick([0, 0, 0], healthy=[False] * 3, key=None) is None


def _pick_held(held: list[int], in_flight: list[int], healthy: list[bool] | None = None,
               slack: int = 0) -> tuple[int, str] | None:
    return pick_replica(in_flight, healthy or [True] * 3, key=KEY, ring=RING, bound=1.25, home_slack=slack, warm=0,
                        start=0, held=held)


def test_the_replica_holding_the_most_of_the_prompt_takes_it_within_the_bound() -> None:
    home = RING.home(KEY)
    others = [i for i in RING.walk(KEY) if i != home]
    held = [0, 0, 0]
    held[others[1]], held[others[0]] = 5, 3
    assert _pick_held(held, [0, 0, 0]) == (others[1], "held")  # the longest held prefix, not the ring's home
    loads = [1, 1, 1]
    loads[others[1]] = 4  # over the bound (ceil(1.25 * 7 / 3) = 3): the next longest
    assert _pick_held(held, loads) == (others[0], "held")
    assert _pick_held(held, [0, 0, 0], healthy=[i != others[1] for i in range(3)]) == (others[0], "held")
    held[others[0]] = 5  # equal prefixes, equal loads: the first on the walk
    assert _pick_held(held, [0, 0, 0]) == (others[0], "held")
    loads = [1, 1, 1]
    loads[others[1]] = 0  # equal prefixes: the less loaded, though second on the walk and others[0] has room
    assert _pick_held(held, loads) == (others[1], "held")
    loads[others[1]] = 3  # the less loaded holder is the first again
    assert _pick_held(held, loads) == (others[0], "held")


def test_nothing_held_within_the_bound_goes_by_the_ring() -> None:
    assert _pick_held([0, 0, 0], [0, 0, 0]) == (RING.home(KEY), "home")
    home = RING.home(KEY)
    held = [0, 0, 0]
    held[home] = 2
    loads = [0, 0, 0]
    loads[home] = 9  # the only holder is over the bound: spilled by the ring's walk
    index, reason = _pick_held(held, loads)  # type: ignore[misc]
    assert index != home and reason == "spilled"


def test_the_longest_holder_may_go_past_the_bound_by_the_slack_before_the_prompt_goes_cold() -> None:
    home = RING.home(KEY)
    holder = next(i for i in RING.walk(KEY) if i != home)
    held = [0, 0, 0]
    held[holder] = 4
    loads = [0, 0, 0]
    loads[holder] = 2  # capacity ceil(1.25 * 3 / 3) = 2: at the bound
    assert _pick_held(held, loads, slack=1) == (holder, "held")
    loads[holder] = 3  # past the bound and the slack: by the ring
    index, reason = _pick_held(held, loads, slack=1)  # type: ignore[misc]
    assert reason != "held" and index != holder


def _pick_placed(footprint: list[int | None], in_flight: list[int], warm: int = 0,
                 healthy: list[bool] | None = None) -> tuple[int, str] | None:
    return pick_replica(in_flight, healthy or [True] * 3, key=KEY, ring=RING, bound=1.25, home_slack=0, warm=warm,
                        start=0, held=[0, 0, 0], footprint=footprint)


def test_a_prompt_held_nowhere_goes_to_the_emptier_of_its_two_ring_replicas() -> None:
    home, second, third = RING.walk(KEY)
    footprint = [0, 0, 0]
    footprint[home], footprint[second], footprint[third] = 50, 20, 0
    assert _pick_placed(footprint, [0, 0, 0]) == (second, "placed")  # not the third: two choices, not all
    footprint[second] = 40  # emptier, but not by a quarter: a few blocks' difference does not move a prompt
    assert _pick_placed(footprint, [0, 0, 0]) == (home, "home")
    footprint[second] = 20
    footprint[second] = None  # its engine reported nothing yet: its count says nothing; equal loads: the home
    assert _pick_placed(footprint, [0, 0, 0]) == (home, "home")
    footprint[second] = 20
    healthy = [i != second for i in range(3)]  # the two are the first two healthy ones
    assert _pick_placed(footprint, [0, 0, 0], healthy=healthy) == (third, "placed")
    loads = [0, 0, 0]
    loads[second] = 9  # the emptier one is over the bound: the walk goes on from it, as from a home
    index, reason = _pick_placed(footprint, loads)  # type: ignore[misc]
    assert index != second and reason in ("home", "spilled")


def test_a_prompt_held_nowhere_goes_to_the_less_loaded_of_its_two_ring_replicas_when_their_engines_hold_alike() -> None:
    home, second, third = RING.walk(KEY)
    footprint = [160, 160, 160]  # full caches: every engine holds as many blocks
    loads = [5, 5, 5]
    assert _pick_placed(footprint, loads) == (home, "home")  # equals: the ring's home
    loads[home] = 6  # within the load bound (7 allowed)
    assert _pick_placed(footprint, loads) == (second, "placed")  # the home is busier: the second takes it
    loads[third] = 3  # not the third, however idle: two choices, not all
    assert _pick_placed(footprint, loads) == (second, "placed")
    footprint[second] = None  # an engine that reported nothing yet: load decides too
    assert _pick_placed(footprint, loads) == (second, "placed")
    footprint[second], footprint[home] = 160, 100  # the home is clearly emptier: it keeps the prompt, busier or not
    assert _pick_placed(footprint, loads) == (home, "home")


def test_a_prompt_held_nowhere_is_placed_alike_whatever_this_gateways_memory_says() -> None:
    home, second, third = RING.walk(KEY)
    footprint = [0, 0, 0]
    footprint[home] = 50  # the second holds none: under three quarters of the home's
    assert _pick_placed(footprint, [0, 0, 0], warm=1 << third) == (second, "placed")
    assert _pick_placed(footprint, [0, 0, 0], warm=1 << home) == (second, "placed")


def test_the_longest_holder_may_go_past_the_bound_up_to_the_held_bound() -> None:
    ring = HashRing([f"http://r{n}/v1" for n in range(4)])
    holder = next(i for i in ring.walk(KEY) if i != ring.home(KEY))
    held = [0, 0, 0, 0]
    held[holder] = 4
    loads = [3, 3, 3, 3]  # 16 in flight, 17 with this one: bound 1.25 allows 6, held_bound 1.75 allows 8
    loads[holder] = 7

    def pick(held_bound: float) -> tuple[int, str] | None:
        return pick_replica(loads, [True] * 4, key=KEY, ring=ring, bound=1.25, home_slack=0, warm=0, start=0,
                            held=held, held_bound=held_bound)

    assert pick(1.75) == (holder, "held")
    assert pick(1.0)[0] != holder  # type: ignore[index]
    loads[holder] = 8  # past 1.75 x the mean too (18 in flight allow 8): prefilled cold elsewhere
    assert pick(1.75)[0] != holder  # type: ignore[index]


def test_the_longest_holder_keeps_the_prompt_within_its_allowance_whatever_load_each_gateway_sees() -> None:
    ring = HashRing([f"http://r{n}/v1" for n in range(4)])
    longest, shorter = [i for i in ring.walk(KEY) if i != ring.home(KEY)][:2]
    held = [0, 0, 0, 0]
    held[longest], held[shorter] = 6, 2  # the shorter holds the tenant's preamble only

    def pick(loads: list[int]) -> tuple[int, str] | None:
        return pick_replica(loads, [True] * 4, key=KEY, ring=ring, bound=1.25, home_slack=1, warm=0, start=0,
                            held=held, held_bound=2.0)

    for view in ([4, 4, 4, 4], [3, 3, 3, 3], [2, 5, 2, 5]):  # what four gateways might each see
        loads = list(view)
        loads[longest] = 7  # past 1.25 x the mean in every view, within 2 x
        assert pick(loads) == (longest, "held")


def test_a_held_list_counts_the_replicas_of_the_pool_that_picks() -> None:
    """A request that overflows from a pool of two replicas to one of three (or back) must be placed again:
    the first pool's held list indexes its own replicas. Checked before any index, not discovered as an
    IndexError deep in the holders' walk, or as a holder of the wrong pool on a smaller ring."""
    two = HashRing(["http://a/v1", "http://b/v1"])
    assert pick_replica([0, 0, 0], [True] * 3, key=KEY, ring=RING, bound=1.25, home_slack=0, warm=0, start=0,
                        held=[0, 0, 4]) == (2, "held")  # the overflow pool's own placement
    for ring, held in ((RING, [4, 0]), (two, [0, 0, 4])):  # the first pool's, on the other
        with pytest.raises(ValueError, match=f"held counts {len(held)} replicas, the ring has {ring.size}"):
            pick_replica([0] * ring.size, [True] * ring.size, key=KEY, ring=ring, bound=1.25, home_slack=0,
                         warm=0, start=0, held=held)


def test_a_prompt_only_a_far_fuller_engine_holds_moves_once_to_the_emptier_of_its_ring_pair() -> None:
    """Two engines, one restarted with an empty cache: the other holds every prompt. A prompt held there alone
    moves to the restarted one (one cold prefill) while that one holds under 3/4 as many blocks and is no busier;
    once held twice, once the footprints are within the margin, or where the other is busier, the holder keeps it."""
    ring = HashRing(["http://r0/v1", "http://r1/v1"])

    def pick(held: list[int], footprint: list[int | None], loads: list[int]) -> tuple[int, str] | None:
        return pick_replica(loads, [True, True], key=KEY, ring=ring, bound=1.25, home_slack=1, warm=0, start=0,
                            held=held, footprint=footprint, held_bound=3.0)

    for holder in (0, 1):
        back = 1 - holder
        held, footprint = [0, 0], [0, 0]
        held[holder], footprint[holder] = 6, 900
        busy = [0, 0]
        busy[holder] = 2  # the holder serves every request
        assert pick(held, footprint, busy) == (back, "rehomed")  # the restarted engine holds nothing yet
        assert pick(held, footprint, [1, 1]) == (back, "rehomed")  # as busy: it moves too
        idle = [0, 0]
        idle[back] = 1
        assert pick(held, footprint, idle) == (holder, "held")  # the emptier one is the busier: it stays
        footprint[back] = 700  # within the margin: prompts stay where they are held
        assert pick(held, footprint, busy) == (holder, "held")
        footprint[back] = 100
        held[back] = 6  # moved before: held twice, load decides between equal holders
        assert pick(held, footprint, busy) == (back, "held")
        footprint[back] = None  # its engine has reported nothing: no move on a guess
        held[back] = 0
        assert pick(held, footprint, busy) == (holder, "held")


def test_equal_holders_as_busy_take_the_prompt_in_turn() -> None:
    """Two engines hold the prompt alike and are as busy: they take its requests in turn, not the first on the
    ring every time; a busier one, or one holding less, does not."""
    ring = HashRing(["http://r0/v1", "http://r1/v1"])

    def pick(held: list[int], loads: list[int], turn: int) -> tuple[int, str] | None:
        return pick_replica(loads, [True, True], key=KEY, ring=ring, bound=1.25, home_slack=1, warm=0, start=turn,
                            held=held, footprint=[900, 900], held_bound=3.0)

    assert {pick([4, 4], [1, 1], turn) for turn in range(4)} == {(0, "held"), (1, "held")}
    assert {pick([4, 4], [2, 1], turn) for turn in range(4)} == {(1, "held")}
    assert {pick([4, 3], [1, 1], turn) for turn in range(4)} == {(0, "held")}


def test_a_named_sessions_prompt_held_alike_by_two_engines_stays_on_its_own_whatever_their_loads() -> None:
    """Every engine holds an agent's shared system prompt and tools, and a match that ends within them holds the
    session's prompt alike everywhere: the session's own replica (its first holder on the ring walk) keeps its
    turns, where load or the turn would send one to the other engine to prefill the conversation again."""
    ring = HashRing(["http://a/v1", "http://b/v1"])
    home, other = list(ring.walk(KEY))[:2]
    held = [5, 5]

    def pick(loads: list[int], start: int, session: bool) -> int:
        choice = pick_replica(loads, [True, True], key=KEY, ring=ring, bound=1.25, home_slack=0, warm=0, start=start,
                              held=held, session=session)
        assert choice is not None and choice[1] == "held"
        return choice[0]

    busier_home = [0, 0]
    busier_home[home] = 1
    assert {pick([0, 0], start, True) for start in range(4)} == {home}
    assert pick(busier_home, 0, True) == home
    assert {pick([0, 0], start, False) for start in range(4)} == {home, other}  # no session: in turn
    assert pick(busier_home, 0, False) == other
