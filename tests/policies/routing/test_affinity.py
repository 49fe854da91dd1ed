from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from policies.routing.affinity import HashRing, bounded_choice, prefix_key

REPLICAS = [f"http://10.0.0.{n}:8000/v1" for n in range(1, 5)]
SYSTEM = ("You are the ACME support agent. " * 40,)  # ~1,300 characters


def _key(*pieces: str, model: str = "m", salt: str | None = "s", chars: int = 1024) -> int:
    return prefix_key(pieces, model, salt, chars)


def test_key_depends_on_the_prompt_start_only() -> None:
    base = _key(*SYSTEM, "<user>", "Where is order 1?")
    assert _key(*SYSTEM, "<user>", "Where is order 2?") == base  # differs past the first 1,024 chars
    assert _key("You are ACME's agent.", "<user>", "Where is order 1?") != base
    assert _key(*SYSTEM, "<user>", "Where is order 2?", chars=2048) != _key(*SYSTEM, "<user>", "Where is order 1?",
                                                                          chars=2048)


def test_key_separates_models_and_cache_salts() -> None:
    base = _key(*SYSTEM)
    assert _key(*SYSTEM, model="other") != base
    assert _key(*SYSTEM, salt="tenant-b") != base
    assert _key(*SYSTEM, salt=None) != base


def test_key_sees_piece_boundaries_within_the_window() -> None:
    assert _key("ab", "c") == _key("a", "bc")  # the rendered text is what the engine caches
    assert _key("short prompt") == _key("short prompt")


def test_ring_and_key_are_the_same_in_another_process() -> None:
    """Independent gateway processes (each with its own str-hash seed) pick the same replica."""
    script = ("from policies.routing.affinity import HashRing, bounded_choice, prefix_key\n"
              f"ring = HashRing({REPLICAS!r})\n"
              "for n in range(50):\n"
              "    key = prefix_key(('system ' * n, '<user>', 'hi'), 'm', 'salt', 1024)\n"
              "    print(bounded_choice(ring, key, [0, 0, 0, 0], [True] * 4, 1.25))\n")
    picks = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        picks.append(out.stdout.split())
    ring = HashRing(REPLICAS)
    here = [str(bounded_choice(ring, prefix_key(("system " * n, "<user>", "hi"), "m", "salt", 1024),
                               [0, 0, 0, 0], [True] * 4, 1.25)) for n in range(50)]
    assert picks[0] == picks[1] == here
    assert len(set(here)) == 4  # and the 50 prefixes spread over all replicas


def test_keys_spread_evenly_over_replicas() -> None:
    ring = HashRing(REPLICAS)
    rng = random.Random(1)
    counts = Counter(next(ring.walk(rng.getrandbits(64))) for _ in range(20_000))
    assert sorted(counts) == [0, 1, 2, 3]
    assert all(0.15 < count / 20_000 < 0.35 for count in counts.values()), counts


def test_a_hot_prefix_spills_only_past_the_load_bound() -> None:
    """One prefix, requests arriving and never finishing: the home replica takes them until it holds
    1.25x the mean, then the next replica on the ring, and so on."""
    ring = HashRing(REPLICAS)
    key = _key(*SYSTEM)
    home = next(ring.walk(key))
    loads = [0, 0, 0, 0]
    for request in range(1, 401):
        index = bounded_choice(ring, key, loads, [True] * 4, 1.25)
        assert index is not None
        loads[index] += 1
        assert max(loads) <= math.ceil(1.25 * request / 4)
    assert loads[home] == max(loads)
    assert max(loads) / (sum(loads) / 4) <= 1.26


def test_the_home_replica_holds_home_slack_past_the_bound_and_no_other_does() -> None:
    ring = HashRing(REPLICAS)
    key = _key(*SYSTEM)
    home, second, third, _ = ring.walk(key)
    loads = [0, 0, 0, 0]
    for request in range(1, 401):
        index = bounded_choice(ring, key, loads, [True] * 4, 1.25, home_slack=2)
        assert index is not None
        loads[index] += 1
        capacity = math.ceil(1.25 * request / 4)
        assert loads[home] <= capacity + 2
        assert all(loads[n] <= capacity for n in range(4) if n != home)
    assert loads[home] > max(loads[n] for n in range(4) if n != home)
    # Capacity is 4 in the first two cases: home takes a 6th request, not a 7th; then the next
    # replica on the ring takes it, within the bound only (capacity 5 in the last case).
    assert bounded_choice(ring, key, _with(home=5, second=2), [True] * 4, 1.25, home_slack=2) == home
    assert bounded_choice(ring, key, _with(home=6, second=2), [True] * 4, 1.25, home_slack=2) == second
    assert bounded_choice(ring, key, _with(home=7, second=5), [True] * 4, 1.25, home_slack=2) == third
    # With home down, the next healthy replica is every process's home for the key, slack included.
    down = [n != home for n in range(4)]
    assert bounded_choice(ring, key, _with(home=0, second=4), down, 1.25, home_slack=2) == second


def test_a_prefix_goes_to_the_least_loaded_replica_that_holds_it_before_the_home_uses_its_slack() -> None:
    ring = HashRing(REPLICAS)
    key = _key(*SYSTEM)
    home, second, third, fourth = ring.walk(key)
    full_home = _with(home=5, second=2, third=2)  # capacity 4: home past the bound, within its slack of 2
    assert bounded_choice(ring, key, full_home, [True] * 4, 1.25, home_slack=2) == home
    warm_third = 1 << third  # the ring's next replica, second, has room too, but would prefill cold
    assert bounded_choice(ring, key, full_home, [True] * 4, 1.25, home_slack=2, warm=warm_third) == third
    assert bounded_choice(ring, key, full_home, [True] * 4, 1.25, home_slack=2, warm=1 << second) == second
    # Within the bound, the less loaded of home and a warm replica, home on a tie; a warm replica
    # past the bound is not taken.
    assert bounded_choice(ring, key, _with(home=1), [True] * 4, 1.25, home_slack=2, warm=warm_third) == home
    assert bounded_choice(ring, key, _with(home=1, third=0), [True] * 4, 1.25, home_slack=2, warm=warm_third) == third
    assert bounded_choice(ring, key, _with(home=1, second=0), [True] * 4, 1.25, home_slack=2, warm=warm_third) == home
    hot_third = _with(home=5, second=2, third=5)
    assert bounded_choice(ring, key, hot_third, [True] * 4, 1.25, home_slack=2, warm=warm_third) == home
    # Of several warm replicas, the least loaded, the first on the key's walk on a tie; the home's
    # own bit changes nothing.
    both = 1 << home | 1 << fourth | 1 << third
    assert bounded_choice(ring, key, full_home, [True] * 4, 1.25, home_slack=2, warm=both) == fourth  # holds 1
    tied = _with(home=5, second=2, third=2, fourth=2)
    assert bounded_choice(ring, key, tied, [True] * 4, 1.25, home_slack=2, warm=both) == third


def test_remembering_warm_replicas_puts_each_prefix_on_fewer_replicas_at_no_worse_balance() -> None:
    """A closed loop of 16 clients over 4 replicas, 48 prompts x 8 requests (the shape of the routing
    benchmark), each request taking 60 ms plus 40 ms when its replica prefills the prompt cold."""
    import heapq

    def run(seed: int, remember: bool) -> tuple[int, float]:
        rng = random.Random(seed)
        ring = HashRing(REPLICAS)
        keys = [rng.getrandbits(64) for _ in range(48)]
        queue = [key for key in keys for _ in range(8)]
        rng.shuffle(queue)
        loads, warm, ends, area, last = [0] * 4, dict.fromkeys(keys, 0), [], [0.0] * 4, 0.0
        cold = 0

        def send(now: float) -> None:
            nonlocal cold
            if queue:
                key = queue.pop()
                index = bounded_choice(ring, key, loads, [True] * 4, 1.25, 1, warm[key] if remember else 0)
                assert index is not None
                prefill = not warm[key] >> index & 1
                cold += prefill
                warm[key] |= 1 << index
                loads[index] += 1
                heapq.heappush(ends, (now + (0.06 + 0.04 * prefill) * rng.uniform(0.7, 1.3), index))

        for _ in range(16):
            send(0.0)
        while ends:
            now, index = heapq.heappop(ends)
            area = [a + load * (now - last) for a, load in zip(area, loads, strict=True)]
            last = now
            loads[index] -= 1
            send(now)
        return cold, max(area) / (sum(area) / 4)

    seeds = range(12)
    without = [run(seed, remember=False) for seed in seeds]
    with_warm = [run(seed, remember=True) for seed in seeds]
    first_sight = 48 * len(seeds)  # each prompt's first request is cold anywhere
    extra_without = sum(c for c, _ in without) - first_sight
    extra_with = sum(c for c, _ in with_warm) - first_sight
    assert extra_with < 0.9 * extra_without, (extra_with, extra_without)
    assert sum(b for _, b in with_warm) <= sum(b for _, b in without)


def _with(**named: int) -> list[int]:
    """Loads for SYSTEM's ring walk (home, second, third, fourth); unnamed ones hold 1."""
    order = list(HashRing(REPLICAS).walk(_key(*SYSTEM)))
    loads = [1, 1, 1, 1]
    for rank, name in enumerate(("home", "second", "third", "fourth")):
        if name in named:
            loads[order[rank]] = named[name]
    return loads


def test_light_load_keeps_every_request_of_a_prefix_home() -> None:
    ring = HashRing(REPLICAS)
    key = _key(*SYSTEM)
    home = next(ring.walk(key))
    loads = [2, 2, 2, 2]
    assert all(bounded_choice(ring, key, loads, [True] * 4, 1.25) == home for _ in range(10))


def test_unhealthy_replicas_are_skipped_and_only_their_keys_move() -> None:
    ring = HashRing(REPLICAS)
    rng = random.Random(2)
    keys = [rng.getrandbits(64) for _ in range(2_000)]
    before = [bounded_choice(ring, k, [0] * 4, [True] * 4, 1.25) for k in keys]
    assert before == [ring.home(k) for k in keys]  # idle and healthy: every key at its home
    after = [bounded_choice(ring, k, [0] * 4, [True, False, True, True], 1.25) for k in keys]
    assert 1 not in after
    moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert moved and all(b == 1 for b, _ in moved)  # keys homed elsewhere stay where they were
    assert bounded_choice(ring, keys[0], [0] * 4, [False] * 4, 1.25) is None


@given(
    loads=st.lists(st.integers(0, 50), min_size=1, max_size=6),
    health=st.lists(st.booleans(), min_size=6, max_size=6),
    key=st.integers(0, 2**64 - 1),
    bound=st.floats(1.0, 3.0),
    slack=st.integers(0, 3),
    warm=st.integers(0, 2**6 - 1),
)
def test_choice_is_healthy_and_within_capacity(loads: list[int], health: list[bool], key: int, bound: float,
                                               slack: int, warm: int) -> None:
    healthy = health[: len(loads)]
    ring = HashRing([f"r{n}" for n in range(len(loads))])
    index = bounded_choice(ring, key, loads, healthy, bound, slack, warm)
    live = [n for n in range(len(loads)) if healthy[n]]
    if not live:
        assert index is None
        return
    assert index is not None and healthy[index]
    home = next(n for n in ring.walk(key) if healthy[n])
    capacity = math.ceil(bound * (sum(loads[n] for n in live) + 1) / len(live))
    assert loads[index] + 1 <= capacity + (slack if index == home else 0)
    if loads[home] + 1 <= capacity:  # the home, or a replica that holds the prefix and is less loaded
        assert index == home or (warm >> index & 1 and loads[index] < loads[home])
