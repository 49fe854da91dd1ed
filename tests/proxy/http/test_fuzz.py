"""Bad input, tried on purpose: a thousand generated bodies, valid and broken, against a running
gateway. Valid ones get 200; every answer is 2xx or 4xx in OpenAI's error form, never a 5xx, never a
hang; afterwards the gateway still answers. (tests/bench/fuzz.py runs the same with 10,000+.)"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from proxy.app import create_app
from tests.support.bodies import broken_request, is_openai_error, valid_request
from tests.support.configs import make_config, pool
from tests.support.fake_server import FakeServer
from tests.support.servers import serve_in_thread

SETTINGS = settings(max_examples=500, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def gateway(fake: FakeServer) -> Iterator[httpx.Client]:
    config = {"pools": [pool("p", fake.base_url)], "limits": {"max_tokens": 16}}
    with ExitStack() as stack:
        origin = stack.enter_context(serve_in_thread(create_app(make_config(config))))
        yield stack.enter_context(httpx.Client(base_url=origin, timeout=10))


def _send(client: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return client.post(path, content=body, headers={"content-type": "application/json"})


@SETTINGS
@given(request=valid_request())
def test_valid_bodies_are_answered(gateway: httpx.Client, request: tuple[str, bytes]) -> None:
    answer = _send(gateway, *request)
    assert answer.status_code == 200, (request, answer.text)
    assert _whole(request[0], answer), (request, answer.text[-300:])


def _whole(path: str, answer: httpx.Response) -> bool:
    """The endpoint's own answer, whole: a stream to its last event (no error event in its place), a
    Responses answer a finished response."""
    if answer.headers["content-type"].startswith("text/event-stream"):
        last = answer.content.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        if path == "/v1/responses":
            return last.startswith(b"event: response.completed\n")
        return last == b"data: [DONE]"
    payload = orjson.loads(answer.content)
    return payload.get("status") == "completed" if path == "/v1/responses" else "error" not in payload


def test_broken_bodies_get_a_4xx_in_openai_form_never_a_5xx_and_the_gateway_still_answers(
        gateway: httpx.Client) -> None:
    """500 broken bodies: most are refused, none gets a 5xx, and the gateway answers afterwards."""
    statuses: Counter[int] = Counter()

    @SETTINGS
    @given(request=broken_request())
    def send_broken(request: tuple[str, bytes]) -> None:
        answer = _send(gateway, *request)
        statuses[answer.status_code] += 1
        assert answer.status_code < 500, (request[0], request[1][:300], answer.status_code, answer.text[:300])
        if answer.status_code >= 400:
            assert is_openai_error(orjson.loads(answer.content)), answer.text[:300]

    send_broken()
    assert sum(statuses.values()) == 500, statuses
    assert sum(count for status, count in statuses.items() if 400 <= status < 500) >= 300, statuses
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "still there?"}]}
    assert gateway.post("/v1/chat/completions", json=body).status_code == 200
    assert gateway.get("/health").status_code == 200
