"""The published OpenAPI document, and schemathesis fuzzing the running gateway from it: every
answer is documented, has the documented shape and is never a 5xx; bodies the schema calls invalid
are refused. (Driven through hypothesis directly: schemathesis's pytest plugin does not load under
this pytest.)"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from proxy.app import FastPath, create_app
from tests.support.configs import make_config, pool
from tests.support.fake_server import FakeServer
from tests.support.openapi_cases import CASES, CHECKS, DOCUMENT
from tests.support.servers import serve_in_thread


@pytest.fixture(scope="module")
def origin(fake: FakeServer) -> Iterator[str]:
    config = {"pools": [pool("p", fake.base_url)], "limits": {"max_tokens": 16}}
    with ExitStack() as stack:
        yield stack.enter_context(serve_in_thread(create_app(make_config(config))))


def test_the_served_document_is_the_committed_one(origin: str) -> None:
    assert httpx.get(origin + "/openapi.json").json() == DOCUMENT
    assert {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/responses/{response_id}",
            "/v1/messages", "/v1/messages/count_tokens", "/v1/models"} <= set(DOCUMENT["paths"])


def test_every_route_the_gateway_serves_is_in_the_document() -> None:
    app = create_app(make_config({"pools": [pool("p", "http://127.0.0.1:9/v1")]}))
    assert isinstance(app, FastPath)
    served = {getattr(route, "path", "") for route in app.app.routes} - {"/openapi.json"}
    assert {"/v1/messages", "/admin/route/v1/messages"} <= served
    assert served <= set(DOCUMENT["paths"]), served - set(DOCUMENT["paths"])


def test_the_gateway_keeps_to_its_document_and_the_fuzzing_reaches_every_operation_both_ways(origin: str) -> None:
    seen: Counter[str] = Counter()

    @settings(max_examples=520, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
    @given(case=CASES)
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call_and_validate(base_url=origin, checks=CHECKS, timeout=10)
        mode = case.meta.generation.mode.value if case.meta else ""
        seen[f"{case.operation.label} {mode} {response.status_code}"] += 1

    fuzz()
    labels = " ".join(seen)
    for operation in ("POST /v1/chat/completions", "POST /v1/completions", "POST /v1/embeddings",
                      "POST /v1/responses", "POST /v1/messages", "POST /v1/messages/count_tokens",
                      "POST /admin/route/v1/messages"):
        assert f"{operation} positive 200" in labels and f"{operation} negative 400" in labels, seen
