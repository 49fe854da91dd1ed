"""Each replica's engine as prefixgate reads it from the engine's own /metrics: shown on prefixgate's
/metrics per replica, and the requests other senders have there counted in the replica choice."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from policies.routing.health import EjectionRules
from proxy.clock import SYSTEM_CLOCK
from proxy.config.upstream import EngineMetrics
from proxy.engine.tiny_model import ensure_tiny_model
from proxy.upstream.placement import Placement
from proxy.upstream.replica import Replica
from proxy.upstream.replica_load import poll_replica, read_replica
from proxy.upstream.replica_pool import ReplicaPool
from tests.support.clock import FakeClock
from tests.support.configs import make_config, pool
from tests.support.fake_server import FakeServer
from tests.support.gateways import gateway_processes
from tests.support.metrics_text import sample_sum
from tests.support.mock_transport import MockReply, MockUpstreams
from tests.support.replica_choice import PROMPTS, ask, served_by
from tests.support.waiting import wait_until

FAST = {"engine_metrics": {"interval": 0.1}}


def _metrics(proxy: str) -> str:
    return httpx.get(proxy + "/metrics").text


def _until(proxy: str, name: str, replica: FakeServer, value: float, timeout: float = 10) -> str:
    """prefixgate's /metrics once its ``name`` for ``replica`` reads ``value`` (fails after ``timeout`` s)."""

    def reading() -> float:
        return sample_sum(_metrics(proxy), name, pool="p", replica=replica.base_url)

    def page_with_value() -> str | None:
        text = _metrics(proxy)
        return text if sample_sum(text, name, pool="p", replica=replica.base_url) == value else None

    return wait_until(page_with_value, timeout=timeout, what=f"{name} of {replica.base_url} to read {value}",
                      state=reading)


def _served(proxy: str, replicas: list[FakeServer], system: str, tag: str) -> list[int]:
    served = []
    for turn in range(4):
        question = f"{tag} question {turn}"
        ask(proxy, system, question)
        served.append(served_by(replicas, question))
    return served


def test_requests_others_queued_at_a_replica_move_its_prefix_elsewhere(
        start_proxy: Callable[..., str], replicas: list[FakeServer]) -> None:
    proxy = start_proxy({"pools": [pool("p", *(r.base_url for r in replicas), **FAST)]})
    system = PROMPTS[0]
    home = _served(proxy, replicas, system, "alone")[0]
    other = 1 - home
    busy = replicas[home]
    busy.app.waiting = 12  # another gateway's (or a direct client's) requests, queued in that engine
    text = _until(proxy, "prefixgate_engine_others_requests", busy, 12)  # two readings in a row saw them
    assert sample_sum(text, "prefixgate_engine_waiting", pool="p", replica=busy.base_url) == 12
    assert sample_sum(text, "prefixgate_engine_up", pool="p", replica=busy.base_url) == 1
    assert sample_sum(text, "prefixgate_engine_others_requests", pool="p", replica=busy.base_url) == 12
    assert sample_sum(text, "prefixgate_engine_kv_cache_usage", pool="p", replica=busy.base_url) == 0.75
    assert _served(proxy, replicas, system, "busy") == [other] * 4
    busy.app.waiting = 0
    _until(proxy, "prefixgate_engine_others_requests", busy, 0)
    assert _served(proxy, replicas, system, "drained") == [home] * 4


def test_a_reading_that_stops_coming_stops_counting(start_proxy: Callable[..., str],
                                                    replicas: list[FakeServer]) -> None:
    clock = FakeClock()  # readings stay fresh for three intervals on it, until it moves
    proxy = start_proxy({"pools": [pool("p", *(r.base_url for r in replicas), **FAST)]}, clock=clock)
    system = PROMPTS[1]
    home = _served(proxy, replicas, system, "alone")[0]
    busy = replicas[home]
    busy.app.waiting = 12
    _until(proxy, "prefixgate_engine_others_requests", busy, 12)
    busy.app.serves_metrics = False  # the engine still answers requests, no longer its metrics
    text = _until(proxy, "prefixgate_engine_up", busy, 0)
    assert sample_sum(text, "prefixgate_engine_up", pool="p", replica=busy.base_url) == 0
    clock.advance(0.4)  # three intervals: the last reading is too old to count
    assert sample_sum(_metrics(proxy), "prefixgate_engine_others_requests", pool="p", replica=busy.base_url) == 0
    assert _served(proxy, replicas, system, "stale") == [home] * 4


def test_upstreams_without_vllm_metrics_route_on_this_process_alone(
        start_proxy: Callable[..., str], replicas: list[FakeServer], caplog: pytest.LogCaptureFixture) -> None:
    for replica in replicas:
        replica.app.serves_metrics = False
    caplog.set_level(logging.INFO, logger="prefixgate")
    proxy = start_proxy({"pools": [pool("p", *(r.base_url for r in replicas), **FAST)]})

    def answered_without_vllm_metrics() -> set[str]:  # logged once a replica's first reading is done
        return {r.base_url for r in replicas for record in caplog.records
                if f"replica {r.base_url} of pool 'p' serves no vLLM metrics" in record.getMessage()}

    wait_until(lambda: len(answered_without_vllm_metrics()) == 2, timeout=10,
               what="each replica's first reading of /metrics", state=answered_without_vllm_metrics)
    text = _metrics(proxy)
    assert [sample_sum(text, "prefixgate_engine_up", pool="p", replica=r.base_url) for r in replicas] == [0, 0]
    assert "prefixgate_engine_running{" not in text
    assert len(set(_served(proxy, replicas, PROMPTS[2], "plain"))) == 1


def test_the_engine_figures_follow_the_engine(start_proxy: Callable[..., str], replicas: list[FakeServer]) -> None:
    """Running requests and the prefix-cache hit rate between readings, as the engine reports them."""
    target = replicas[0]
    proxy = start_proxy({"pools": [pool("p", target.base_url, **FAST)]})
    # A stream that stays open in the engine (up to 10 s) until the client leaves: the reading must see it
    # while it runs, however late a loaded machine lets the check begin.
    body = {"model": "fake-model", "max_tokens": 2, "stream": True, "fake_tokens": 100, "fake_delay_ms": 100,
            "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=10) as client, client.stream("POST", proxy + "/v1/chat/completions", json=body):
        text = _until(proxy, "prefixgate_engine_running", target, 1)
        assert sample_sum(text, "prefixgate_engine_running", pool="p", replica=target.base_url) == 1
        assert sample_sum(text, "prefixgate_engine_others_requests", pool="p", replica=target.base_url) == 0
    ask(proxy, "system", "one more")
    text = _until(proxy, "prefixgate_engine_prefix_cache_hit_rate", target, 0.75)
    assert sample_sum(text, "prefixgate_engine_prefix_cache_hit_rate", pool="p", replica=target.base_url) == 0.75


def _slow(origin: str, question: str, first_ms: int) -> int:
    body = {"model": "fake-slow-stream", "max_tokens": 2, "stream": True, "fake_first_ms": first_ms,
            "messages": [{"role": "system", "content": PROMPTS[3]}, {"role": "user", "content": question}]}
    return httpx.post(origin + "/v1/chat/completions", json=body, timeout=30).status_code


@pytest.mark.parametrize("interval", [0.1, 0])
def test_a_gateway_process_sees_the_requests_another_one_holds(tmp_path: Path, replicas: list[FakeServer],
                                                               interval: float) -> None:
    """Two gateway processes, one prompt: the first holds five long requests at the prompt's home
    replica; the second, reading the engines' metrics, sends the prompt's next request to the other
    replica, where on its own count (no readings) it would have sent it home too."""
    config = {"pools": [pool("p", *(r.base_url for r in replicas), engine_metrics={"interval": interval})]}
    with gateway_processes(config, tmp_path, 2) as (first, second), ThreadPoolExecutor(5) as held:
        answers = [held.submit(_slow, first, f"held {n}", 3000) for n in range(5)]
        wait_until(lambda: sum(r.app.stats.active for r in replicas) >= 5, timeout=5, interval=0.02,
                   what="the five held requests to reach the replicas")
        home = served_by(replicas, "held 0")
        assert [served_by(replicas, f"held {n}") for n in range(5)] == [home] * 5
        if interval:
            _until(second, "prefixgate_engine_others_requests", replicas[home], 5)
        assert _slow(second, "next", 1) == 200
        assert served_by(replicas, "next") == (1 - home if interval else home)
        assert [answer.result() for answer in answers] == [200] * 5


class _RaceTransport:
    """Answers GET /metrics while one of this process's own requests starts and ends (the race a
    lone gateway's sequential traffic runs into): the engine counts it, in_flight no longer does."""

    def __init__(self) -> None:
        self.replica: Replica | None = None

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        assert self.replica is not None
        self.replica.take()  # sent, and still running at the engine when it wrote its metrics ...
        self.replica.release()  # ... and ended before the reading was parsed
        return 200, b'vllm:num_requests_running{engine="0"} 1.0\nvllm:num_requests_waiting{engine="0"} 0.0\n'


def test_a_request_of_its_own_that_came_and_went_during_a_reading_is_not_anothers() -> None:
    transport = _RaceTransport()
    replica = Replica("http://127.0.0.1:9/v1", transport, "/health", EjectionRules(), "p",  # type: ignore[arg-type]
                      SYSTEM_CLOCK)
    transport.replica = replica
    for _ in range(2):  # two readings: the others' load counted is what both saw
        assert asyncio.run(read_replica(replica, EngineMetrics(interval=1))) is True
    assert replica.reading is not None and replica.reading.sample.running == 1
    assert replica.others == 0


def test_gateways_read_an_engine_on_the_same_instants_of_the_wall_clock() -> None:
    """Each process reads at once, then on the wall clock's multiples of the interval: two gateways
    started at different moments read the engine together, so they count the same others' load."""
    pauses: dict[float, list[float]] = {}

    class _Stop(Exception):
        pass

    for started in (1000.30, 1000.85):
        def wall(started: float = started) -> float:
            return started + sum(pauses[started])

        async def sleep(seconds: float, started: float = started) -> None:
            pauses[started].append(seconds)
            if len(pauses[started]) == 3:
                raise _Stop

        pauses[started] = []
        transport = _RaceTransport()
        replica = Replica("http://127.0.0.1:9/v1", transport, "/health", EjectionRules(), "p",  # type: ignore[arg-type]
                          SYSTEM_CLOCK)
        transport.replica = replica
        with pytest.raises(_Stop):
            asyncio.run(poll_replica(replica, EngineMetrics(interval=0.5), wall=wall, sleep=sleep))
    readings = {started: [round(started + sum(pauses[started][:n]), 6) for n in range(1, 4)] for started in pauses}
    assert readings == {1000.30: [1000.5, 1001.0, 1001.5], 1000.85: [1001.0, 1001.5, 1002.0]}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(ensure_tiny_model(tmp_path_factory.mktemp("tiny")))


def _kv_gateway(tiny_model: str, running: list[int], own_before: list[int], shared_load: bool = True) -> ReplicaPool:
    """A gateway process's pool (``balance: kv_events``) over three engines that report ``running``
    requests, two readings of each taken while this process had ``own_before`` in flight there. Its holders
    may take twice the mean: three times the mean of three replicas is more than any one can hold."""
    urls = [f"http://127.0.0.1:{9000 + n}/v1" for n in range(3)]

    def engine(url: str, body: bytes) -> MockReply:
        count = running[int(url.split(":")[2][:4]) - 9000]
        return MockReply(200, [f'vllm:num_requests_running{{engine="0"}} {count}.0\n'.encode()])

    kv_events = {"tokenizer": tiny_model, "shared_load": shared_load, "held_bound": 2.0}  # reachable on three
    config = make_config({"pools": [pool("p", *urls, balance="kv_events", kv_events=kv_events)]})
    gateway = ReplicaPool(config.pools[0], MockUpstreams(engine), clock=FakeClock())
    for replica, own in zip(gateway.replicas, own_before, strict=True):
        for _ in range(own):
            replica.take()
        for _ in range(2):
            asyncio.run(read_replica(replica, EngineMetrics(interval=1)))
    return gateway


def test_with_shared_load_gateways_reach_the_same_kv_choice_whatever_each_sent_since_the_reading(
        tiny_model: str) -> None:
    """Two gateways read the same engines at the same instants; one of them has since sent three more
    requests to the replica holding the prompt. By its own count that replica is past the holder's
    allowance (twice the mean) and, by default, it sends the prompt elsewhere; with ``shared_load`` it
    counts what the engines reported, as the other gateway does, and both send the prompt to the holder.
    A lone gateway keeps its exact count: its requests that ended since the reading no longer count."""
    holder, held = 0, [12, 0, 0]
    for shared_load in (True, False):
        first, second = (_kv_gateway(tiny_model, [4, 1, 1], [0, 0, 0], shared_load) for _ in range(2))
        for _ in range(3):
            first.replicas[holder].take()
        placement = Placement(12345, held, 16)
        choices = [(choice.replica, choice.reason) for choice in (g.explain(placement) for g in (first, second))]
        assert (choices[0] == choices[1]) is shared_load
        assert choices[1] == (first.replicas[holder].base_url, "held")

    alone = _kv_gateway(tiny_model, [4, 0, 0], [4, 0, 0])  # the engine's four are all its own
    for _ in range(3):
        alone.replicas[holder].release()
    assert [replica["in_flight"] for replica in alone.explain(Placement(12345, held, 16)).replicas] == [1, 0, 0]


def test_the_pick_names_the_replica_that_holds_the_prompt_and_how_much_of_it(tiny_model: str) -> None:
    """``Pool.pick`` reads the placement ``Pool.place`` found once: the engine holding most of the prompt
    takes it, and the pick says how many of the prompt's tokens that engine held (what
    ``prefixgate_kv_held_tokens`` records). ``explain`` reads the same placement and says the same."""
    gateway = _kv_gateway(tiny_model, [0, 0, 0], [0, 0, 0])
    placement = Placement(12345, [0, 12, 3], 16)
    picked = gateway.pick(placement)
    assert (picked.replica, picked.reason, picked.held_tokens) == (gateway.replicas[1], "held", 12 * 16)
    explained = gateway.explain(placement)
    assert (explained.replica, [r["held_tokens"] for r in explained.replicas]) == (
        gateway.replicas[1].base_url, [0, 192, 48])
    assert gateway.pick(Placement(12345)).held_tokens is None  # no KV events read for it: nothing to say
