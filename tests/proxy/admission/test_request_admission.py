"""Admission through the gateway: exact tenant rate limits (in memory and shared through a real
redis-server by several gateway processes), max_tokens clamps and refusals, token settlement, and
routing by predicted output length."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import partial
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from policies.admission.length import RECALL_SAMPLES
from tests.support.chat_body import chat_body
from tests.support.clock import FakeClock
from tests.support.configs import make_config, pool
from tests.support.fake_server import FakeServer
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateways import gateway_processes
from tests.support.metrics_text import sample_sum
from tests.support.redis_server import PATIENT_MS, RedisServer
from tests.support.servers import serve_in_thread
from tests.support.waiting import wait_until, wait_until_async

KEY = "sk-tenant-acme-1"
AUTH = {"Authorization": f"Bearer {KEY}"}
chat = partial(chat_body, user_text="Hello there", model="fake-model")


def config(fake: FakeServer, limits: dict, **extra: object) -> dict:
    # A burst opens a hundred upstream connections at once on a machine this test shares with
    # the fake upstream and the client: connecting may take longer than the 5 s default. Likewise
    # a shared limiter's Redis call may take longer than its 100 ms default (see PATIENT_MS).
    if isinstance(extra.get("redis"), dict):
        extra["redis"] = {"timeout_ms": PATIENT_MS, **extra["redis"]}  # type: ignore[dict-item]
    return {"pools": [pool("p", fake.base_url, timeouts={"connect": 60})],
            "auth": {"keys": [{"tenant": "acme", "key": KEY}]}, "limits": limits, **extra}


async def burst(urls: list[str], count: int) -> list[httpx.Response]:
    """``count`` requests at once, spread over ``urls``."""
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        return await asyncio.gather(*(
            client.post(urls[i % len(urls)] + "/v1/chat/completions", json=chat(max_tokens=4), headers=AUTH)
            for i in range(count)
        ))


def assert_exactly_100_admitted(statuses: list[int]) -> None:
    """900 refused with 429, and the 100 admitted answered. On this test's one machine, shared by
    the client, the gateway and the fake upstream, a burst of 100 upstream connections now and then
    loses one or two to the network stack (a 502 or 504 that is the pool's business, not the
    limiter's), so admitted means "not refused"."""
    counts = Counter(statuses)
    assert counts[429] == 900 and len(statuses) == 1000, counts
    assert counts[200] >= 97 and set(counts) <= {200, 429, 502, 504}, counts


def test_a_thousand_concurrent_requests_against_100_per_minute_admit_exactly_100(
    fake: FakeServer, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy(config(fake, {"requests_per_minute": 100}))
    before = fake.app.stats.requests
    answers = asyncio.run(burst([proxy], 1000))
    statuses = [a.status_code for a in answers]
    assert_exactly_100_admitted(statuses)
    assert fake.app.stats.requests - before <= 100  # the refused never reached the engine
    refused = next(a for a in answers if a.status_code == 429)
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests" and "limit 100" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-limit-requests"] == "100"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    admitted = next(a for a in answers if a.status_code == 200)
    assert admitted.headers["x-ratelimit-limit-requests"] == "100"
    assert 'prefixgate_rate_limited_total{limit="requests",tenant="acme"} 900.0' in httpx.get(proxy + "/metrics").text


def test_three_gateway_processes_sharing_redis_admit_exactly_100(
    fake: FakeServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    data = config(fake, {"requests_per_minute": 100}, redis={"url": redis_server.url})
    with gateway_processes(data, tmp_path, 3) as origins:
        answers = asyncio.run(burst(origins, 1000))
    assert_exactly_100_admitted([a.status_code for a in answers])  # each process alone would admit 100


def test_three_gateway_processes_sharing_redis_admit_exactly_the_token_budget(
    fake: FakeServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    """300 requests at once over three processes, each reserving its prompt plus max_tokens (100)
    against one budget of 3,000 tokens a minute. The upstream holds every answer for 10 s, so nothing
    is settled while the burst is admitted: exactly budget // reservation get in, where each process
    alone would admit that many again."""
    budget = 3000
    data = config(fake, {"tokens_per_minute": budget}, redis={"url": redis_server.url})
    body = chat(max_tokens=100, fake_tokens=4, fake_delay_ms=2500)

    async def at_once(origins: list[str]) -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            return await asyncio.gather(*(client.post(origins[i % 3] + "/v1/chat/completions", json=body,
                                                      headers=AUTH) for i in range(300)))

    before = fake.app.stats.requests
    with gateway_processes(data, tmp_path, 3) as origins:
        answers = asyncio.run(at_once(origins))
    admitted = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(admitted) + len(refused) == 300, Counter(a.status_code for a in answers)
    reservation = budget - max(int(a.headers["x-ratelimit-remaining-tokens"]) for a in admitted)
    assert 100 < reservation < 130  # max_tokens and the prompt's estimate
    assert len(admitted) == budget // reservation, (len(admitted), reservation)
    assert fake.app.stats.requests - before == len(admitted)  # the refused never reached the engine
    assert {a.json()["error"]["type"] for a in refused} == {"tokens"}


def test_settlement_is_shared_by_gateway_processes(
    fake: FakeServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Requests taking turns over three processes each reserve ~500 tokens of 1,000 a minute but use
    17 (the engine's usage: 12 prompt, 5 output): every process sees what the others settled."""
    data = config(fake, {"tokens_per_minute": 1000}, redis={"url": redis_server.url})
    remaining = []
    with gateway_processes(data, tmp_path, 3) as origins:
        for index in range(6):
            answer = httpx.post(origins[index % 3] + "/v1/chat/completions", headers=AUTH, timeout=30,
                                json=chat(max_tokens=500, fake_tokens=5, stream=index % 2 == 1))
            assert answer.status_code == 200, answer.text
            remaining.append(int(answer.headers["x-ratelimit-remaining-tokens"]))
    assert [before - after for before, after in pairwise(remaining)] == [17] * 5, remaining


def limiter_unavailable(proxy: str, action: str) -> float:
    return sample_sum(httpx.get(proxy + "/metrics").text, "prefixgate_limiter_unavailable_total", action=action)


def test_with_redis_stopped_limits_hold_per_process_and_are_shared_again_when_it_returns(
    fake: FakeServer, start_proxy: Callable[..., str], redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()  # the pause after a failed Redis call (retry_s) runs on it
    first, second = (start_proxy(config(fake, {"requests_per_minute": 3}, redis={"url": redis_server.url,
                                                                                 "retry_s": 0.3}), clock=clock)
                     for _ in range(2))
    ask = lambda proxy: httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=4), headers=AUTH)  # noqa: E731
    assert ask(first).status_code == 200  # one of three, shared
    redis_server.stop()
    with caplog.at_level("WARNING", logger="prefixgate"):
        # Each process alone: three more on each, the fourth refused by its own window.
        assert [ask(first).status_code for _ in range(4)] == [200, 200, 200, 429]
        assert [ask(second).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert limiter_unavailable(first, "local") == 4 and limiter_unavailable(second, "local") == 4
    assert any("limits hold per process" in r.getMessage() for r in caplog.records)
    redis_server.start()  # same port, empty: the shared window starts again
    clock.advance(0.4)  # past retry_s
    assert [ask(first).status_code for _ in range(2)] + [ask(second).status_code for _ in range(2)] == [200] * 3 + [429]


def test_with_redis_stopped_and_limits_when_down_refuse_limited_requests_get_503_until_it_returns(
    fake: FakeServer, start_proxy: Callable[..., str], redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    proxy = start_proxy(config(fake, {"requests_per_minute": 100},
                               redis={"url": redis_server.url, "retry_s": 0.3, "limits_when_down": "refuse"}),
                        clock=clock)
    answer = httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=4), headers=AUTH)
    assert answer.status_code == 200
    redis_server.stop()
    before = fake.app.stats.requests
    with caplog.at_level("WARNING", logger="prefixgate"):
        refused = [httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=4), headers=AUTH)
                   for _ in range(3)]
    assert [r.status_code for r in refused] == [503] * 3 and fake.app.stats.requests == before
    error = refused[0].json()["error"]
    assert error["code"] == "rate_limiter_unavailable" and "unreachable" in error["message"]
    assert 1 <= int(refused[0].headers["retry-after"]) <= 1
    assert limiter_unavailable(proxy, "refused") == 3
    assert any("limited requests are refused" in r.getMessage() for r in caplog.records)
    redis_server.start()
    clock.advance(0.4)  # past retry_s
    assert httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=4), headers=AUTH).status_code == 200


def test_max_tokens_is_defaulted_clamped_or_refused(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    clamp = start_proxy(config(fake, {"max_tokens": 100, "default_max_tokens": 50}))
    assert httpx.post(clamp + "/v1/chat/completions", json=chat(), headers=AUTH).status_code == 200
    assert fake.app.stats.last_body["max_tokens"] == 50
    answer = httpx.post(clamp + "/v1/chat/completions", json=chat(max_tokens=5000), headers=AUTH)
    assert answer.status_code == 200 and fake.app.stats.last_body["max_tokens"] == 100
    assert answer.json()["usage"]["completion_tokens"] == 100

    reject = start_proxy(config(fake, {"max_tokens": 100, "max_tokens_action": "reject"}))
    before = fake.app.stats.requests
    refused = httpx.post(reject + "/v1/chat/completions", json=chat(max_tokens=5000), headers=AUTH)
    assert refused.status_code == 400 and fake.app.stats.requests == before
    error = refused.json()["error"]
    assert error["param"] == "max_tokens" and "5000" in error["message"] and "limits.max_tokens" in error["message"]


def test_a_pool_limit_applies_with_the_tenants_action(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, max_tokens_limit=64)],
                         "limits": {"max_tokens_action": "reject"}})
    refused = httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=65))
    assert refused.status_code == 400 and "pool 'p'.max_tokens" in refused.json()["error"]["message"]
    assert httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=64)).status_code == 200


def test_a_prompt_over_the_input_cap_is_refused(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(config(fake, {"max_input_tokens": 50}))
    long = {"model": "fake-model", "messages": [{"role": "user", "content": "word " * 100}]}
    refused = httpx.post(proxy + "/v1/chat/completions", json=long, headers=AUTH)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages"
    assert "above the limit of 50 input tokens" in refused.json()["error"]["message"]
    assert httpx.post(proxy + "/v1/chat/completions", json=chat(), headers=AUTH).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_reserved_tokens_are_settled_with_the_actual_usage(
    fake: FakeServer, start_proxy: Callable[..., str], stream: bool
) -> None:
    """Each request reserves max_tokens (500) plus its prompt against 1,000 tokens a minute, but uses
    only 5 output tokens: with settlement every one of them fits; without it the second would not."""
    proxy = start_proxy(config(fake, {"tokens_per_minute": 1000}))
    remaining = []
    for _ in range(6):
        answer = httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=500, fake_tokens=5, stream=stream),
                            headers=AUTH)
        assert answer.status_code == 200, answer.text
        remaining.append(int(answer.headers["x-ratelimit-remaining-tokens"]))
    # Read at admission: this request's reservation (~505) plus what each earlier one used: the engine's
    # usage (12 prompt + 5 output), which the gateway asks for even when the client's stream did not.
    used = [before - after for before, after in pairwise(remaining)]
    assert 480 <= remaining[0] < 500, remaining
    assert used == [17] * 5, used
    refused = httpx.post(proxy + "/v1/chat/completions", json=chat(max_tokens=2000), headers=AUTH)
    assert refused.status_code == 429 and "Request too large" in refused.json()["error"]["message"]


@pytest.fixture
def short_and_long() -> Iterator[tuple[FakeServer, FakeServer]]:
    with ExitStack() as stack:
        short, long = FakeUpstream(), FakeUpstream()
        yield (FakeServer(stack.enter_context(serve_in_thread(short)), short),
               FakeServer(stack.enter_context(serve_in_thread(long)), long))


def test_requests_go_to_the_short_or_long_pool_by_predicted_length(
    short_and_long: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]
) -> None:
    short, long = short_and_long
    proxy = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                        min_recall=0, continue_long=False),
                                   pool("long", long.base_url, models=["fake-model"], output="long")]})

    def pool_of(body: dict, **headers: str) -> str:
        answer = httpx.post(proxy + "/v1/chat/completions", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        return answer.headers["x-prefixgate-pool"]

    assert pool_of(chat(max_tokens=32)) == "short"
    assert pool_of(chat(max_tokens=2000, fake_tokens=3)) == "long"
    assert pool_of(chat(fake_tokens=3)) == "long"  # nothing known yet: assumed long
    assert pool_of(chat(max_tokens=32), **{"x-prefixgate-pool": "long"}) == "long"
    for _ in range(8):  # this template's answers turn out short (3 tokens each) ...
        pool_of(chat(fake_tokens=3, stream=True))
    assert pool_of(chat(fake_tokens=3)) == "short"  # ... so an open-ended one now goes short
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_length_predictions_total", pool="long", step="turn", outcome="within") >= 2
    assert sample_sum(metrics, "prefixgate_pool_choices_total", pool="long", reason="named") == 1
    by_length = sample_sum(metrics, "prefixgate_pool_choices_total", reason="length")
    assert by_length + sample_sum(metrics, "prefixgate_pool_choices_total", reason="history") == 12
    assert sum(sample_sum(metrics, "prefixgate_pool_choices_total", pool="short", reason=reason)
               for reason in ("length", "history")) >= 2
    assert sample_sum(metrics, "prefixgate_replica_choices_total", reason="single") == 13
    unknown = httpx.post(proxy + "/v1/chat/completions", json=chat(), headers={"x-prefixgate-pool": "gpu9"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "x-prefixgate-pool"


def test_a_long_answer_in_the_short_pool_streams_whole_and_teaches_the_history(
    short_and_long: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]
) -> None:
    """A template learned short can still answer long: the stream is not cut, the miss is counted where
    operators see it, and after a run of long answers the template goes to the long pool again."""
    short, long = short_and_long
    proxy = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                        min_recall=0, continue_long=False),
                                   pool("long", long.base_url, models=["fake-model"], output="long")]})
    for _ in range(8):
        assert httpx.post(proxy + "/v1/chat/completions", json=chat(fake_tokens=3)).status_code == 200
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=chat(fake_tokens=400, stream=True)) as answer:
        assert answer.headers["x-prefixgate-pool"] == "short"  # predicted short, answered long
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) >= 400  # every token arrived
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_length_predictions_total", pool="short", step="turn", outcome="above") == 1
    pools = [httpx.post(proxy + "/v1/chat/completions", json=chat(fake_tokens=400)).headers["x-prefixgate-pool"]
             for _ in range(9)]
    assert pools[-1] == "long" and pools.count("short") <= 8  # the history followed the change


def test_the_split_waits_for_a_measured_recall_and_merges_the_pools_when_short_answers_are_missed(
    short_and_long: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]
) -> None:
    """With the default min_recall the short pool takes only predicted-short requests once 64 short
    answers showed that prediction catches them; a template whose answers straddle the threshold
    (predicted long, often short) drags the recall down and the two pools serve as one again."""
    short, long = short_and_long
    proxy = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                        continue_long=False),
                                   pool("long", long.base_url, models=["fake-model"], output="long")]})

    def ask(body: dict) -> str:
        answer = httpx.post(proxy + "/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        return answer.headers["x-prefixgate-pool"]

    def gauge(name: str) -> float:
        return sample_sum(httpx.get(proxy + "/metrics").text, name, pool="short")

    def app_chat(tokens: int) -> dict:
        return chat(messages=[{"role": "system", "content": "You are a chat app."},
                              {"role": "user", "content": "Hello there"}], fake_tokens=tokens)

    # predicted short, yet the pools serve as one until recall is known (answers of 200 tokens: short, but too near
    # the threshold for the template's own history to decide it)
    for _ in range(RECALL_SAMPLES):
        ask(chat(max_tokens=256, fake_tokens=200))
    wait_until(lambda: gauge("prefixgate_length_split") == 1, timeout=10, interval=0.05, what="the split")
    assert gauge("prefixgate_length_short_recall") == 1.0
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_pool_choices_total", reason="merged") == RECALL_SAMPLES
    assert [ask(chat(max_tokens=256, fake_tokens=200)) for _ in range(4)] == ["short"] * 4  # split: by length
    assert ask(app_chat(3)) == "long"  # an unknown template: assumed long
    for n in range(30):  # two answers in three short, its p90 long: short answers the split misses
        ask(app_chat(3 if n % 3 else 400))
    wait_until(lambda: gauge("prefixgate_length_split") == 0, timeout=10, interval=0.05, what="the merge")
    assert gauge("prefixgate_length_short_recall") < 0.95
    ask(app_chat(3))
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_pool_choices_total", reason="merged") > RECALL_SAMPLES


def test_two_clear_cut_apps_are_routed_by_their_own_answers_within_ten_and_a_drift_is_followed(
    short_and_long: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]
) -> None:
    """Default settings, two apps that send no max_tokens: a ticket classifier that answers in 3 tokens and an
    article writer that answers in 600. The pool-wide split waits for 64 short answers, yet each app's own history
    is decisive after 8: the classifier goes short and the writer long within 10 answers each. When the classifier
    starts writing essays it goes back to the pool-wide rule at once, and long within 16 answers."""
    short, long = short_and_long
    proxy = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short"),
                                   pool("long", long.base_url, models=["fake-model"], output="long")]})

    def app(system: str, tokens: int) -> dict:
        return chat(messages=[{"role": "system", "content": system}, {"role": "user", "content": "Next one."}],
                    fake_tokens=tokens)

    def ask(body: dict) -> tuple[str, str]:
        answer = httpx.post(proxy + "/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        explained = httpx.post(proxy + "/admin/route/v1/chat/completions", json=body)
        return answer.headers["x-prefixgate-pool"], explained.json()["pool_reason"]

    classifier, writer = "Label the ticket: bug, billing or other.", "You write long articles for the blog."
    routed = [(ask(app(classifier, 3)), ask(app(writer, 600))) for _ in range(10)]
    assert routed[-2:] == [(("short", "history"), ("long", "history"))] * 2
    drifted = [ask(app(classifier, 600)) for _ in range(16)]
    assert drifted[1][1] != "history"  # one essay, and the classifier is no longer decided
    assert drifted[-1] == ("long", "history")
    metrics = httpx.get(proxy + "/metrics").text
    assert sample_sum(metrics, "prefixgate_pool_choices_total", pool="long", reason="history") >= 3


@pytest.mark.parametrize("continue_long", [False, True])
def test_a_classifier_decided_short_does_not_wait_behind_what_the_merge_sent_the_short_pool(
    short_and_long: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str], continue_long: bool
) -> None:
    """While the pools serve as one, the merge sends a request of an app it knows nothing about to the short pool
    (both idle), where it runs on (it never answers). The classifier, decided short, then goes where the merge
    sends it (the idle long pool) instead of waiting there, sent as asked (not cut where the pools continue long);
    once that request ends, it is back in the short pool."""
    short, long = short_and_long
    models = ["fake-model", "fake-hang"]
    proxy = start_proxy({"pools": [pool("short", short.base_url, models=models, output="short",
                                        continue_long=continue_long),
                                   pool("long", long.base_url, models=models, output="long")]})
    classifier = chat(messages=[{"role": "system", "content": "Label the ticket: bug, billing or other."},
                                {"role": "user", "content": "Next one."}], fake_tokens=3)
    unknown_app = chat(model="fake-hang", messages=[{"role": "system", "content": "You answer support chats."},
                                                    {"role": "user", "content": "Where is my order?"}],
                       seed=7)  # a seeded answer is never cut: the merge places it, continue_long or not

    async def scenario() -> list[tuple[str, str]]:
        async with httpx.AsyncClient(base_url=proxy, timeout=60) as client:

            async def ask() -> tuple[str, str]:
                explained = (await client.post("/admin/route/v1/chat/completions", json=classifier)).json()
                answer = await client.post("/v1/chat/completions", json=classifier)
                assert answer.status_code == 200, answer.text
                whys.append(explained.get("why"))
                return answer.headers["x-prefixgate-pool"], explained["pool_reason"]

            async def decided() -> bool:
                explained = await client.post("/admin/route/v1/chat/completions", json=classifier)
                return explained.json()["pool_reason"] == "history"

            routed = [await ask() for _ in range(9)]
            hanging = asyncio.create_task(client.post("/v1/chat/completions", json=unknown_app))
            await wait_until_async(lambda: short.app.stats.active + long.app.stats.active > 0, timeout=30,
                                   what="the unknown app's request upstream")
            routed.append(await ask())
            hanging.cancel()  # the client leaves; the gateway aborts the request upstream
            await wait_until_async(lambda: short.app.stats.disconnects > 0, timeout=30, what="the abort upstream")
            await wait_until_async(decided, timeout=30, what="the classifier placed by its history again")
            routed.append(await ask())
            return routed

    whys: list[str | None] = []
    routed = asyncio.run(scenario())
    assert routed[8] == ("short", "history")
    assert short.app.stats.disconnects == 1  # the merge had sent the unknown app to the short pool
    assert routed[9] == ("long", "merged")  # not held behind it
    assert "max_tokens" not in long.app.stats.recent_bodies[-1]  # sent as asked
    assert routed[10] == ("short", "history")
    if continue_long:
        assert "the short pool serves requests the merge placed: placed by the merge, not cut" in str(whys[9])


def test_with_decided_after_0_the_pools_wait_for_the_pool_wide_recall(
    short_and_long: tuple[FakeServer, FakeServer], start_proxy: Callable[..., str]
) -> None:
    short, long = short_and_long
    proxy = start_proxy({"pools": [pool("short", short.base_url, models=["fake-model"], output="short",
                                        decided_after=0),
                                   pool("long", long.base_url, models=["fake-model"], output="long")]})
    body = chat(messages=[{"role": "system", "content": "You write long articles."},
                          {"role": "user", "content": "Next one."}], fake_tokens=600)
    statuses = [httpx.post(proxy + "/v1/chat/completions", json=body).status_code for _ in range(10)]
    assert statuses == [200] * 10
    explained = httpx.post(proxy + "/admin/route/v1/chat/completions", json=body).json()
    assert explained["pool_reason"] == "merged"


def test_a_configured_tokenizer_counts_the_prompt(fake: FakeServer, start_proxy: Callable[..., str],
                                                  tmp_path: Path) -> None:
    """With the model's tokenizer.json the cap counts its tokens: here one per word plus three for the
    role marker, so 40 words pass a cap of 50 and 60 words (63 tokens) do not, though the estimate
    (3 characters a word) would have let both through."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["ab user", "<user>"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    proxy = start_proxy(config(fake, {"max_input_tokens": 50}, tokenizer=str(path)))

    def ask(words: int) -> httpx.Response:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "ab " * words}]}
        return httpx.post(proxy + "/v1/chat/completions", json=body, headers=AUTH)

    assert ask(40).status_code == 200
    refused = ask(60)
    assert refused.status_code == 400 and "The prompt is 63 tokens" in refused.json()["error"]["message"]


def test_a_missing_tokenizer_file_is_a_config_error(tmp_path: Path) -> None:
    from proxy.config.load import ConfigError

    with pytest.raises(ConfigError, match=r"tokenizer: .*no tokenizer file"):
        make_config({"tokenizer": str(tmp_path / "missing.json")})
