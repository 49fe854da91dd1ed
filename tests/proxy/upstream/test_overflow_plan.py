"""Overflow plans the call again for the pool it goes to, in memory: that pool's caps, and the prompt's
place among that pool's replicas (``balance: kv_events``: the blocks each of its engines holds).

The first pool is saturated by streams left unread (Starlette's TestClient runs the app on only as the test
reads the body, so each holds its slot), so the next request is shed and overflows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from proxy.config.gateway import OPEN_TENANT
from proxy.engine.tiny_model import ensure_tiny_model
from proxy.upstream.pool import Pool
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockUpstreams

BLOCK = 16
QUIET = {"health": {"interval": 0}, "engine_metrics": {"interval": 0}}  # no checks or readings of their own
SYSTEM = " ".join(["You answer questions about orders, refunds and invoices, politely and briefly."] * 6)
BODY = {"model": "m", "max_tokens": 8,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is my order?"}]}


@contextmanager
def _saturated(client: TestClient, slots: int) -> Iterator[None]:
    """The first pool's every slot held by a stream, until the block ends."""
    with ExitStack() as streams:
        for _ in range(slots):
            held = streams.enter_context(client.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True}))
            assert held.status_code == 200 and "x-prefixgate-overflow" not in held.headers
        yield  # the streams close unread, which gives their slots back


def _pools(client: TestClient) -> dict[str, Pool]:
    return client.app_state["gateway"].upstreams.by_name


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(ensure_tiny_model(tmp_path_factory.mktemp("tiny")))


def _holds(pool: Pool, replica: int, body: dict[str, Any]) -> int:
    """As if the engine of the pool's replica ``replica`` had reported caching the prompt's blocks (its KV
    events), and every other engine as many blocks of another prompt (engines alike full: the prompt is not
    moved to an emptier one); returns how many."""
    kv = pool.kv
    assert kv is not None
    tokens = kv.tokens.of_body(body)
    other = kv.tokens.of_body({**body, "messages": [{"role": "system", "content": "Another app. " * 90}]})
    assert tokens is not None and other is not None
    count = len(tokens) // BLOCK
    kv.index.stored(replica, None, [f"{pool.name}-{replica}-{n}" for n in range(count)], tokens[:count * BLOCK], BLOCK)
    for number in range(len(pool.replicas)):
        if number != replica:
            kv.index.stored(number, None, [f"{pool.name}-{number}-other-{n}" for n in range(count)],
                            other[:count * BLOCK], BLOCK)
    for feed in kv.feeds:
        feed.state.block_size, feed.state.last_seq = BLOCK, 0
    return count


@pytest.mark.parametrize(("first", "second"), [(2, 3), (3, 2)], ids=["2 to 3 replicas", "3 to 2 replicas"])
def test_a_request_that_overflows_goes_to_the_replica_of_the_overflow_pool_that_holds_its_prompt(
        tmp_path: Path, tiny_model: str, first: int, second: int) -> None:
    """Each pool holds the prompt on another replica: the last one of the first pool, the first one of the
    overflow pool. Placed by its first pool's held list, the request would index past the end of a bigger
    pool (IndexError) or pick that list's holder number on a smaller one."""
    local = [f"http://local-{n}:8000/v1" for n in range(first)]
    big = [f"http://big-{n}:8000/v1" for n in range(second)]
    kv = {"balance": "kv_events", "kv_events": {"tokenizer": tiny_model}, **QUIET}
    config = {"pools": [pool("local", *local, models=["m"], max_in_flight=1, queue_size=0, overflow_to="big", **kv),
                        pool("big", *big, models=["big-model"], **kv)],
              "prompt": {"cache_salt": "off"}}  # blocks as the engines would hash them: no salt to mix in
    upstreams = MockUpstreams(MockEngine())  # its 404 to /kv_event_sources names none: the test feeds the index
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        pools = _pools(client)
        assert _holds(pools["local"], first - 1, BODY) > 0 and _holds(pools["big"], 0, BODY) > 0
        with _saturated(client, first):
            shed = client.post("/v1/chat/completions", json=BODY)
        metrics = client.get("/metrics").text
    assert shed.status_code == 200, shed.text
    assert shed.headers["x-prefixgate-pool"] == "big" and shed.headers["x-prefixgate-overflow"] == "local"
    assert upstreams.posts()[-1].url == big[0] + "/chat/completions"
    assert sample_sum(metrics, "prefixgate_replica_choices_total", pool="big", reason="held") == 1


def _capped(tmp_path: Path, action: str) -> tuple[MockUpstreams, Any, Any]:
    """One request overflowing from a pool without caps to one that allows 4 output tokens; the tenant's
    action on a request above a limit is ``action``. Returns the upstreams, the answer, and the metrics."""
    config = {"pools": [pool("local", "http://a:8000/v1", models=["m"], max_in_flight=1, queue_size=0,
                             overflow_to="big", **QUIET),
                        pool("big", "http://b:8000/v1", models=["big-model"], max_tokens_limit=4, **QUIET)],
              "limits": {"max_tokens_action": action}}
    upstreams = MockUpstreams(MockEngine())
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        with _saturated(client, 1):
            shed = client.post("/v1/chat/completions", json=BODY)
        metrics = client.get("/metrics").text
    return upstreams, shed, metrics


def test_a_request_that_overflows_is_clamped_to_the_overflow_pools_max_tokens(tmp_path: Path) -> None:
    upstreams, shed, _ = _capped(tmp_path, "clamp")
    assert shed.status_code == 200 and shed.headers["x-prefixgate-pool"] == "big"
    sent = upstreams.posts()[-1]
    assert sent.url.startswith("http://b:8000") and orjson.loads(sent.body)["max_tokens"] == 4


def test_a_request_the_overflow_pools_caps_refuse_keeps_the_first_pools_503(tmp_path: Path) -> None:
    """The overflow pool would refuse max_tokens 8, but the pool the request was sent to takes it once it has
    room: the client gets the shed's 503 and Retry-After, not a 400 that says its request is wrong."""
    upstreams, shed, metrics = _capped(tmp_path, "reject")
    assert shed.status_code == 503 and "retry-after" in shed.headers
    assert shed.json()["error"]["code"] == "queue_full" and shed.headers["content-type"] == "application/json"
    assert not [call for call in upstreams.posts() if call.url.startswith("http://b:8000")]
    assert sample_sum(metrics, "prefixgate_shed_total", pool="local", reason="queue_full") == 1


def test_an_answer_clamped_by_the_overflow_pool_is_not_replayed_for_the_request_as_sent(tmp_path: Path) -> None:
    """The answer cache keys an answer by the body the engine got: the overflow pool's clamped answer must not
    come back, cut short, for the same request once the first pool has room to answer it whole."""
    config = {"pools": [pool("local", "http://a:8000/v1", models=["m"], max_in_flight=1, queue_size=0,
                             overflow_to="big", **QUIET),
                        pool("big", "http://b:8000/v1", models=["big-model"], max_tokens_limit=4, **QUIET)],
              "tenants": {OPEN_TENANT: {"answer_cache": {"ttl_s": 600}}}}
    exact = {**BODY, "temperature": 0}
    upstreams = MockUpstreams(MockEngine())
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        with _saturated(client, 1):
            clamped = client.post("/v1/chat/completions", json=exact)
        assert clamped.headers["x-prefixgate-pool"] == "big"
        again = client.post("/v1/chat/completions", json=exact)
        repeat = client.post("/v1/chat/completions", json=exact)
    assert again.headers["x-prefixgate-answer-cache"] == "miss"
    last = upstreams.posts()[-1]
    assert last.url.startswith("http://a:8000") and orjson.loads(last.body)["max_tokens"] == 8
    assert repeat.headers.get("x-prefixgate-answer-cache") == "hit"  # the whole answer, stored under its own key


def test_a_responses_request_is_not_overflowed_to_a_pool_that_does_not_serve_the_api(tmp_path: Path) -> None:
    """A litellm pool answers chat completions only: a Responses request the first pool sheds keeps its 503
    (Retry-After) rather than going to the provider as a body it cannot read (a 502 ``provider_error``)."""
    config = {"pools": [pool("local", "http://a:8000/v1", models=["m"], max_in_flight=1, queue_size=0,
                             overflow_to="hosted", **QUIET),
                        {"name": "hosted", "kind": "litellm", "models": ["m"], "litellm_model": "openai/m",
                         "api_base": "http://127.0.0.1:9/v1", "api_key": "unused"}]}
    upstreams = MockUpstreams(MockEngine())
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        with _saturated(client, 1):
            shed = client.post("/v1/responses", json={"model": "m", "input": "Where is my order?"})
        metrics = client.get("/metrics").text
    assert shed.status_code == 503 and "retry-after" in shed.headers, shed.text
    assert shed.json()["error"]["code"] == "queue_full"
    assert sample_sum(metrics, "prefixgate_shed_total", pool="local", reason="queue_full") == 1
    assert sample_sum(metrics, "prefixgate_pool_choices_total", pool="hosted") == 0
