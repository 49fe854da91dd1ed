"""Replica choice inside a pool, seen from the replicas: which one got each request."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.clock import ClockedEngine, FakeClock, settled
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateways import gateway_processes
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.replica_choice import PROMPTS, ask, served_by
from tests.support.servers import free_port, serve_in_thread
from tests.support.waiting import wait_until


def _placement(proxies: list[str], replicas: list[FakeServer]) -> dict[int, set[int]]:
    """Prompt number -> replicas its requests reached, 6 questions per prompt, spread over ``proxies``."""
    placed: dict[int, set[int]] = {}
    for number, system in enumerate(PROMPTS):
        for turn in range(6):
            question = f"prompt {number} question {turn}: where is order {turn * 37}?"
            ask(proxies[turn % len(proxies)], system, question)
            placed.setdefault(number, set()).add(served_by(replicas, question))
    return placed


def test_prompts_that_start_alike_go_to_one_replica(start_proxy: Callable[..., str],
                                                    replicas: list[FakeServer]) -> None:
    proxy = start_proxy({"pools": [pool("p", *(r.base_url for r in replicas))]})
    placed = _placement([proxy], replicas)
    assert all(len(homes) == 1 for homes in placed.values()), placed
    # ... and the prompts share the pool. Their keys carry the tenant's cache salt, from a secret generated in
    # each test's data dir, and the ring is built from the replicas' URLs (random ports): on about one run
    # in a hundred all eight prompts have one home. Forty more prompts, a request each, make it one in 10^11.
    homes = {home for homes in placed.values() for home in homes}
    for number in range(len(PROMPTS), len(PROMPTS) + 40):
        question = f"prompt {number} question 0"
        ask(proxy, f"You are assistant number {number} of ACME. " + "Follow the house rules. " * 30, question)
        homes.add(served_by(replicas, question))
    assert homes == {0, 1}


def test_least_loaded_spreads_each_prompt_over_the_replicas(start_proxy: Callable[..., str],
                                                            replicas: list[FakeServer]) -> None:
    proxy = start_proxy({"pools": [pool("p", *(r.base_url for r in replicas), balance="least_loaded")]})
    placed = _placement([proxy], replicas)
    assert all(homes == {0, 1} for homes in placed.values()), placed
    text = httpx.get(proxy + "/metrics").text
    assert sample_sum(text, "prefixgate_replica_choices_total", reason="least_loaded") == 6 * len(PROMPTS)


def test_independent_gateway_processes_pick_the_same_replica(tmp_path: Path, replicas: list[FakeServer]) -> None:
    """Two prefixgate processes share no state, yet send each prompt's requests to the same engine."""
    config = {"pools": [pool("p", *(r.base_url for r in replicas))]}
    with gateway_processes(config, tmp_path, 2) as origins:
        placed = _placement(origins, replicas)  # alternating between the two
    assert all(len(homes) == 1 for homes in placed.values()), placed


@pytest.mark.parametrize("warm_memory_s", [300, 0])
def test_a_hot_prompt_spills_to_the_next_replica_past_the_load_bound(start_proxy: Callable[..., str],
                                                                      replicas: list[FakeServer],
                                                                      warm_memory_s: float) -> None:
    """Ten overlapping requests with one prompt: with no home_slack, its home replica takes them while
    it holds at most 1.25x the mean in flight (ceil(1.25 * 10 / 2) = 7 at the end), the other replica
    the rest. (With the default home_slack of 1 the home would keep 8 of them.)"""
    proxy = start_proxy({"pools": [pool("p", *(r.base_url for r in replicas), home_slack=0,
                                        warm_memory_s=warm_memory_s)]})

    def ask_hot(turn: int) -> int:
        question = f"hot question {turn}"
        body = {"model": "fake-model", "max_tokens": 2, "fake_delay_ms": 400, "messages": [
            {"role": "system", "content": PROMPTS[0]}, {"role": "user", "content": question}]}
        assert httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10).status_code == 200
        return served_by(replicas, question)

    with ThreadPoolExecutor(10) as pool_of_threads:
        served = list(pool_of_threads.map(ask_hot, range(10)))
    counts = [served.count(0), served.count(1)]
    assert min(counts) >= 3 and max(counts) <= 7, counts
    # /metrics says why: the home replica's requests as home; on the other, the first spill as spilled
    # (a cold prefill there) and the later ones as warm (it has served this prompt since), unless
    # warm memory is off.
    text = httpx.get(proxy + "/metrics").text
    homed, spilled, warm = ([sample_sum(text, "prefixgate_replica_choices_total", pool="p", replica=r.base_url,
                                        reason=reason) for r in replicas] for reason in ("home", "spilled", "warm"))
    home = 0 if homed[0] else 1
    assert homed[1 - home] == 0 and spilled[home] == warm[home] == 0, (homed, spilled, warm)
    cold = 1 if warm_memory_s else counts[1 - home]
    assert (homed[home], spilled[1 - home], warm[1 - home]) == (counts[home], cold, counts[1 - home] - cold)
    assert sample_sum(text, "prefixgate_pool_choices_total", pool="p", reason="model") == 10


def _chat(proxy: str, question: str) -> httpx.Response:
    body = {"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": question}]}
    return httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10)


def test_a_dead_replica_is_ejected_after_consecutive_failures(start_proxy: Callable[..., str]) -> None:
    """Passive ejection only (no active checks, no engine readings, which could tilt the even split of
    the warm-up): the dead replica costs at most eject_after failed requests, then every request goes
    to the live one; back at the same address, it takes requests again."""
    live, dying = FakeUpstream(), FakeUpstream()
    clock = FakeClock()  # the back-off runs on it
    port = free_port()
    with serve_in_thread(live) as live_url:
        with serve_in_thread(dying, port=port) as dying_url:
            proxy = start_proxy({"pools": [pool("p", live_url + "/v1", dying_url + "/v1", balance="least_loaded",
                                                retries=0, health={"interval": 0, "eject_after": 2, "backoff": 3.0},
                                                engine_metrics={"interval": 0})]}, clock=clock)
            assert all(_chat(proxy, f"warm {n}").status_code == 200 for n in range(4))
            assert dying.stats.completed == 2
        statuses = [_chat(proxy, f"after {n}").status_code for n in range(20)]
        assert statuses.count(502) <= 2 and all(s == 200 for s in statuses[4:]), statuses
        assert live.stats.completed == 2 + statuses.count(200)
        with serve_in_thread(dying, port=port):  # the replica comes back
            clock.advance(3.2)  # its back-off runs out; the next request is its half-open probe
            assert all(_chat(proxy, f"back {n}").status_code == 200 for n in range(6))
            assert dying.stats.completed > 2


def test_active_checks_eject_a_dead_replica_before_any_request_fails(start_proxy: Callable[..., str]) -> None:
    """Only the active checks can save these requests: no retry, and passive ejection far away."""
    live, dying = FakeUpstream(), FakeUpstream()
    with serve_in_thread(live) as live_url:
        with serve_in_thread(dying) as dying_url:
            proxy = start_proxy({"pools": [pool("p", live_url + "/v1", dying_url + "/v1", balance="least_loaded",
                                                retries=0, engine_metrics={"interval": 0},
                                                health={"interval": 0.1, "backoff": 5.0, "eject_after": 100})]})
            assert [_chat(proxy, f"warm {n}").status_code for n in range(2)] == [200, 200]
            assert dying.stats.completed == 1  # least_loaded with nothing in flight: the two take turns
        healthy = f'prefixgate_replica_healthy{{pool="p",replica="{dying_url}/v1"}}'
        _wait_for_metric(proxy, healthy, 0.0)  # the checks notice the replica is gone
        assert [_chat(proxy, f"after {n}").status_code for n in range(10)] == [200] * 10
        assert live.stats.completed == 11


def test_health_checks_come_once_per_interval_of_the_clock(tmp_path: Path) -> None:
    """The active checks of a pool of two replicas run on the app's clock: each replica's health URL is
    asked once per ``health.interval`` (ten seconds) as the clock passes it, none before."""
    clock = FakeClock()
    engine = ClockedEngine(clock)
    config = {"pools": [pool("p", "http://a:8000/v1", "http://b:8000/v1", health={"interval": 10},
                             engine_metrics={"interval": 0})]}
    with in_memory_gateway(config, engine, clock, tmp_path) as client:
        for _ in range(13):  # 30 s in steps of 2.5 s
            settled(client)
            clock.advance(2.5)
        settled(client)
    assert sorted(engine.checks) == [(f"http://{replica}:8000/health", at) for replica in "ab"
                                     for at in (1_010.0, 1_020.0, 1_030.0)]


def _wait_for_metric(proxy: str, sample: str, value: float, timeout: float = 10) -> None:
    """Poll /metrics until the exact sample line reads ``value`` (fails after ``timeout`` seconds)."""

    def lines() -> list[str]:
        return httpx.get(proxy + "/metrics").text.splitlines()

    wait_until(lambda: any(line.startswith(sample + " ") and float(line.split()[-1]) == value for line in lines()),
               timeout=timeout, what=f"{sample} to read {value}",
               state=lambda: [line for line in lines() if "replica_healthy" in line])


def test_no_usable_replica_answers_503_at_once_with_retry_after(start_proxy: Callable[..., str]) -> None:
    dead = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    proxy = start_proxy({"pools": [pool("p", *dead, health={"interval": 0, "eject_after": 1, "backoff": 3.0})]})
    assert _chat(proxy, "q1").status_code == 502  # refused by one replica, then (the retry) by the other
    started = time.monotonic()
    response = _chat(proxy, "q3")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_healthy_upstream"
    assert 1 <= int(response.headers["retry-after"]) <= 3
    assert time.monotonic() - started < 0.5  # no connection attempt made


def test_with_retries_every_request_after_a_replica_dies_succeeds(start_proxy: Callable[..., str]) -> None:
    live, dying = FakeUpstream(), FakeUpstream()
    with serve_in_thread(live) as live_url:
        with serve_in_thread(dying) as dying_url:
            proxy = start_proxy({"pools": [pool("p", live_url + "/v1", dying_url + "/v1", balance="least_loaded",
                                                health={"interval": 0})]})
            assert all(_chat(proxy, f"warm {n}").status_code == 200 for n in range(4))
        statuses = [_chat(proxy, f"after {n}").status_code for n in range(20)]
        assert statuses == [200] * 20
        assert live.stats.completed == 2 + 20
        assert 'prefixgate_upstream_retries_total{pool="p"}' in httpx.get(proxy + "/metrics").text


def test_an_engine_answering_503_is_retried_once_on_another_replica(start_proxy: Callable[..., str]) -> None:
    shedding, live = FakeUpstream(fail_status=503), FakeUpstream()
    with serve_in_thread(shedding) as shedding_url, serve_in_thread(live) as live_url:
        proxy = start_proxy({"pools": [pool("p", shedding_url + "/v1", live_url + "/v1", balance="least_loaded",
                                            health={"interval": 0, "eject_after": 100})]})
        assert [_chat(proxy, f"q{n}").status_code for n in range(6)] == [200] * 6
        assert shedding.stats.requests >= 3 and live.stats.completed == 6
        alone = start_proxy({"pools": [pool("q", shedding_url + "/v1", health={"interval": 0})]})
        answer = _chat(alone, "nowhere else to go")  # one replica: its 503 goes to the client as it is
        assert answer.status_code == 503 and answer.json()["error"]["message"] == "fake overload"


def test_a_stream_that_breaks_after_its_first_byte_is_not_retried(start_proxy: Callable[..., str],
                                                                 replicas: list[FakeServer]) -> None:
    proxy = start_proxy({"pools": [pool("p", *(r.base_url for r in replicas), balance="least_loaded",
                                        models=["fake-model", "fake-die"])]})
    body = {"model": "fake-die", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": "go"}]}
    answer = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 200
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert '"upstream_error"' in events[-1] and "[DONE]" not in answer.text  # a terminal error event
    assert sum(r.app.stats.requests for r in replicas) == 1  # the other replica never saw it
    assert _chat(proxy, "the next request").status_code == 200
