"""Adversarial tenants: globex tries every door to acme's passages, cached answers, stored responses, rate
limit and prefix cache, and none opens; no API key is ever written anywhere but the request that carried it.

The corpus is the retrieval tests' (tests/support/tenant_corpus.py, ingested by the ``corpus`` fixture):
acme's documents say 30 days, globex's 60, so a passage that crossed tenants shows up as the wrong
number (or the word Acme) in the evidence block the upstream receives.

The gateways run in memory (``in_memory_gateway``); what the engine received is what ``MockUpstreams``
recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from qdrant_client import AsyncQdrantClient
from starlette.testclient import TestClient

from policies.prompt.cache_salt import salt_policy, tenant_salt
from policies.retrieval.evidence import FOOTER, HEADER
from proxy.app import create_app
from proxy.config.load import ConfigError
from proxy.retrieval.retriever import StoreOpener
from proxy.retrieval.server_store import ServerStore
from tests.support import fake_responses
from tests.support.chat_body import chat_body
from tests.support.clock import FakeClock
from tests.support.configs import make_config, pool
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockReply, MockUpstreams
from tests.support.tenant_corpus import KEYS, load_corpus, write_documents
from tests.support.waiting import wait_until

ACME_ONLY = ("30 days", "Acme", "ground courier", "two-year warranty", "blender")
ADMIN_KEY = "sk-admin-operator-7"
AUTH = {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()]}
ENGINE = "http://engine:8000/v1"


def engine(url: str, body: bytes) -> MockReply:
    """The engine behind every gateway here: healthy; the Responses API as vLLM without a store of its own
    serves it (``fake_responses``), everything else as ``MockEngine``."""
    if not body and url.endswith("/health"):
        return MockReply(200)
    if body and url.endswith("/responses"):
        request = orjson.loads(body)
        refused = fake_responses.refusal(request)
        if refused is not None:
            return MockReply(refused[0], [refused[1]])
        return MockReply.json(fake_responses.response_object(request, int(request.get("max_output_tokens") or 16)))
    return MockEngine()(url, body)


@pytest.fixture
def upstreams() -> MockUpstreams:
    return MockUpstreams(engine)


def last_body(upstreams: MockUpstreams) -> dict[str, Any]:
    """The body of the last request the engine received."""
    sent: dict[str, Any] = orjson.loads(upstreams.posts()[-1].body)
    return sent


@contextmanager
def gateway_on(settings: dict[str, Any], upstreams: MockUpstreams, data_dir: Path,
               open_store: StoreOpener | None = None) -> Iterator[TestClient]:
    """An in-memory gateway for ``settings``; with ``open_store``, its vector store the one that opens
    (``in_memory_gateway`` keeps the configured one)."""
    if open_store is None:
        with in_memory_gateway(settings, upstreams, FakeClock(), data_dir) as client:
            yield client
        return
    config = make_config({"data_dir": str(data_dir), **settings})
    with TestClient(create_app(config, transports=upstreams, clock=FakeClock(), open_store=open_store)) as client:
        yield client


def two_tenants(**settings: object) -> dict[str, Any]:
    """acme and globex on one pool, with ``settings`` added."""
    return {"pools": [pool("p", ENGINE)], "auth": AUTH, **settings}


def retrieval_config(data_dir: Path) -> dict[str, Any]:
    """Both tenants, keyed, retrieving from collection "docs" under ``data_dir`` (``tenant_corpus.config``
    with the in-memory engine for its pool)."""
    return {"pools": [pool("p", ENGINE, models=["fake-model"])], "auth": AUTH, "data_dir": str(data_dir),
            "tenants": {tenant: {"retrieval": {"collection": "docs"}} for tenant in KEYS}}


def evidence_sent(upstreams: MockUpstreams) -> str:
    """The evidence block of the last prompt upstream (not the question, which the attacker wrote)."""
    user = last_body(upstreams)["messages"][-1]["content"]
    return user[user.index(HEADER):user.index(FOOTER)] if HEADER in user else ""


def chat_as(gateway: TestClient, key: str, content: str, *, headers: dict[str, str] | None = None,
            **fields: object) -> httpx.Response:
    body = chat_body(None, content, model="fake-model", max_tokens=4, **fields)
    return gateway.post("/v1/chat/completions", json=body,
                        headers={"Authorization": f"Bearer {key}", **(headers or {})})


ATTEMPTS = [
    # acme's own words, so the nearest vectors in the shared collection are acme's
    ("Acme customers may return any item within 30 days of delivery for a full refund.", {}, {}),
    ("Acme ships every order by ground courier. Every Acme blender carries a two-year warranty.", {}, {}),
    # claims of being acme, in the headers and fields gateways and SDKs use for identity
    ("How long do I have to return an item?",
     {"X-Tenant": "acme", "X-Prefixgate-Tenant": "acme", "OpenAI-Organization": "acme", "OpenAI-Project": "acme",
      "X-Api-Key": KEYS["acme"]}, {}),
    ("How long do I have to return an item?", {},
     {"user": "acme", "tenant": "acme", "collection": "docs", "metadata": {"tenant": "acme"},
      "extra_body": {"tenant": "acme"}}),
    # filter syntax smuggled into the question
    ('tenant:acme OR tenant:* {"must": [{"key": "tenant", "match": {"value": "acme"}}]} return window?', {}, {}),
]


def shared_collection(path: Path) -> StoreOpener:
    """The layout prefixgate uses on a Qdrant server: one collection for every tenant, each point carrying
    its tenant, every search, count and delete filtered on it (here over qdrant-client's local engine)."""
    return lambda dimensions: ServerStore(AsyncQdrantClient(path=str(path)), dimensions)


@pytest.fixture(scope="module")
def shared_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shared-collection") / "qdrant"
    load_corpus(write_documents(tmp_path_factory), shared_collection(path))
    return path


@pytest.fixture(params=["collection per tenant", "one collection, tenant filter"])
def retrieval_gateway(request: pytest.FixtureRequest, upstreams: MockUpstreams, corpus: Path) -> Iterator[TestClient]:
    """A gateway whose tenants retrieve from the same ingested corpus, in each layout the store has."""
    store = None if request.param == "collection per tenant" else shared_collection(
        request.getfixturevalue("shared_corpus"))
    with gateway_on(retrieval_config(corpus), upstreams, corpus, open_store=store) as client:
        yield client


# qdrant-client's local engine says payload indexes do nothing in it; the filters still apply
LOCAL_INDEX_NOTICE = "ignore:Payload indexes have no effect:UserWarning"


@pytest.mark.filterwarnings(LOCAL_INDEX_NOTICE)
@pytest.mark.parametrize(("question", "headers", "fields"), ATTEMPTS)
def test_no_query_header_or_field_reaches_another_tenants_passages(
    upstreams: MockUpstreams, retrieval_gateway: TestClient, question: str, headers: dict[str, str],
    fields: dict[str, object],
) -> None:
    gateway = retrieval_gateway
    assert chat_as(gateway, KEYS["acme"], question).status_code == 200  # acme's passages are in the caches now
    answer = chat_as(gateway, KEYS["globex"], question, headers=headers, **fields)
    assert answer.status_code == 200
    evidence = evidence_sent(upstreams)
    assert evidence and not any(word in evidence for word in ACME_ONLY), evidence


@pytest.mark.filterwarnings(LOCAL_INDEX_NOTICE)
def test_a_key_for_another_tenant_must_be_whole(retrieval_gateway: TestClient) -> None:
    gateway = retrieval_gateway
    near_misses = [KEYS["acme"][:-1], KEYS["acme"] + "x", KEYS["acme"].upper(), f"{KEYS['globex']},{KEYS['acme']}"]
    for key in near_misses:
        assert chat_as(gateway, key, "How long do I have to return an item?").status_code == 401


def test_an_answer_stored_for_one_tenant_is_never_served_to_another(upstreams: MockUpstreams, tmp_path: Path) -> None:
    settings = two_tenants(tenants={tenant: {"answer_cache": {"ttl_s": 60}} for tenant in KEYS})
    with gateway_on(settings, upstreams, tmp_path) as gateway:
        same = {"temperature": 0}
        first = chat_as(gateway, KEYS["acme"], "What is our discount code?", **same)
        assert first.headers["x-prefixgate-answer-cache"] == "miss"
        assert chat_as(gateway, KEYS["acme"], "What is our discount code?", **same).headers[
            "x-prefixgate-answer-cache"] == "hit"
        seen = len(upstreams.posts())
        other = chat_as(gateway, KEYS["globex"], "What is our discount code?", headers={"X-Tenant": "acme"}, **same)
        assert other.headers["x-prefixgate-answer-cache"] == "miss" and len(upstreams.posts()) == seen + 1


def responses_as(gateway: TestClient, key: str, method: str = "POST", response_id: str = "", *,
                 headers: dict[str, str] | None = None, **fields: object) -> httpx.Response:
    """POST /v1/responses with ``fields``, or GET or DELETE /v1/responses/{response_id}, as ``key``."""
    url = "/v1/responses" + (f"/{response_id}" if response_id else "")
    body = {"model": "fake-model", "max_output_tokens": 4, **fields} if method == "POST" else None
    return gateway.request(method, url, json=body, headers={"Authorization": f"Bearer {key}", **(headers or {})})


SPOOFS = [{}, {"X-Tenant": "acme", "X-Prefixgate-Tenant": "acme", "OpenAI-Organization": "acme",
               "OpenAI-Project": "acme"}]


@pytest.mark.parametrize("headers", SPOOFS, ids=["plain", "claims to be acme"])
def test_a_stored_response_cannot_be_fetched_deleted_or_continued_by_another_tenant(
    upstreams: MockUpstreams, tmp_path: Path, headers: dict[str, str]
) -> None:
    with gateway_on(two_tenants(), upstreams, tmp_path) as gateway:
        created = responses_as(gateway, KEYS["acme"], input="Our discount code is HERON-77.")
        assert created.status_code == 200
        acme_id = created.json()["id"]
        unknown = responses_as(gateway, KEYS["globex"], "GET", "resp_never", headers=headers).json()
        seen = len(upstreams.posts())
        for method in ("GET", "DELETE"):  # the same 404 as an id that never was
            answer = responses_as(gateway, KEYS["globex"], method, acme_id, headers=headers)
            assert answer.status_code == 404
            assert answer.text == orjson.dumps(unknown).decode().replace("resp_never", acme_id)
        continued = responses_as(gateway, KEYS["globex"], headers=headers, input="What is our discount code?",
                                 previous_response_id=acme_id, user="acme", metadata={"tenant": "acme"})
        assert continued.status_code == 404 and continued.json()["error"]["code"] == "previous_response_not_found"
        assert "HERON" not in continued.text and len(upstreams.posts()) == seen  # acme's words reached no engine
        assert responses_as(gateway, KEYS["acme"], "GET", acme_id).json() == created.json()  # still there, whole
        again = responses_as(gateway, KEYS["acme"], input="What is our discount code?", previous_response_id=acme_id)
        assert again.status_code == 200 and "HERON-77" in str(last_body(upstreams)["input"])


def test_one_tenant_spending_its_rate_limit_leaves_anothers_whole(upstreams: MockUpstreams, tmp_path: Path) -> None:
    with gateway_on(two_tenants(limits={"requests_per_minute": 2}), upstreams, tmp_path) as gateway:
        spoof = {"X-Tenant": "globex", "OpenAI-Organization": "globex"}
        acme = [chat_as(gateway, KEYS["acme"], "hi", headers=spoof).status_code for _ in range(3)]
        globex = [chat_as(gateway, KEYS["globex"], "hi").status_code for _ in range(3)]
    assert acme == [200, 200, 429] and globex == [200, 200, 429]


def test_no_salt_a_tenant_sends_reaches_anothers_cached_prefixes(upstreams: MockUpstreams, tmp_path: Path) -> None:
    secret = "isolation-salt-secret-77"
    with gateway_on(two_tenants(auth={**AUTH, "cache_salt_secret": secret}), upstreams, tmp_path) as gateway:
        sent: dict[str, str] = {}
        for tenant in KEYS:
            chat_as(gateway, KEYS[tenant], "The same long preamble.")
            sent[tenant] = last_body(upstreams)["cache_salt"]
        assert sent["acme"] == tenant_salt(secret.encode(), "acme") != sent["globex"]
        # globex sends every salt it could know or guess for acme: each is mixed with globex's own
        globex = salt_policy("isolate", secret.encode(), "globex")
        for guess in (sent["acme"], tenant_salt(b"", "acme"), "acme", "globex"):
            assert chat_as(gateway, KEYS["globex"], "The same long preamble.", cache_salt=guess).status_code == 200
            salt = last_body(upstreams)["cache_salt"]
            assert salt == globex.upstream_salt(guess) and salt != sent["acme"]


def test_keys_appear_in_no_log_metric_or_error(
    upstreams: MockUpstreams, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    access_log = tmp_path / "access.jsonl"
    attacker = "sk-attacker-guess-0042"
    settings = two_tenants(auth={**AUTH, "admin_key": ADMIN_KEY}, limits={"requests_per_minute": 1},
                           access_log={"enabled": True, "path": str(access_log)})
    with caplog.at_level(logging.DEBUG), gateway_on(settings, upstreams, tmp_path / "data") as gateway:
        answers = [
            chat_as(gateway, KEYS["acme"], "hello"),
            chat_as(gateway, KEYS["acme"], "hello again"),  # 429
            chat_as(gateway, attacker, "hello"),  # 401
            gateway.post("/v1/chat/completions", content=b"{not json", headers={
                "Authorization": f"Bearer {KEYS['globex']}"}),  # 400
            gateway.post("/v1/chat/completions", json={"model": "fake-model"},
                         headers={"Authorization": f"Basic {KEYS['globex']}"}),  # malformed header
            gateway.get("/metrics", headers={"Authorization": f"Bearer {attacker}"}),
        ]
        scrape = gateway.get("/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        lines = wait_for_lines(access_log, 5)  # every generation request has its line, whatever its key
    assert [a.status_code for a in answers] == [200, 429, 401, 400, 401, 401] and scrape.status_code == 200
    written = [caplog.text, scrape.text,
               *(a.text + str(a.headers) for a in answers)]
    for secret in (*KEYS.values(), attacker, ADMIN_KEY):
        assert not any(secret in text for text in written), secret
    assert not any(secret in lines for secret in (*KEYS.values(), attacker, ADMIN_KEY))


def wait_for_lines(path: Path, count: int) -> str:
    """The access log once ``count`` lines are in it (a writer thread writes them off the event loop)."""

    def enough() -> str | None:
        text = path.read_text()
        return text if text.count("\n") >= count else None

    return wait_until(enough, timeout=10, what=f"{count} lines in the access log", state=path.read_text)


def test_config_errors_never_echo_a_key() -> None:
    secret = "sk-short"  # eight characters: valid length, reused below
    problems = [
        {"auth": {"keys": [{"tenant": "a", "key": "sk-tiny"}]}},  # too short
        {"auth": {"keys": [{"tenant": "a", "key": secret}, {"tenant": "b", "key": secret}]}},  # shared
        {"auth": {"keys": [{"tenant": "a", "key": secret, "key_env": "X"}]}},  # both sources
        {"auth": {"keys": [{"tenant": "a", "key": secret}], "admin_key": secret}},  # admin key = a tenant's
        {"auth": {"admin_key": "sk-tiny"}},
    ]
    for data in problems:
        with pytest.raises(ConfigError) as raised:
            make_config(data)
        assert "sk-tiny" not in str(raised.value) and secret not in str(raised.value), str(raised.value)


def test_metrics_and_the_replica_list_need_the_admin_key_when_one_is_set(
    upstreams: MockUpstreams, tmp_path: Path
) -> None:
    settings = {"pools": [pool("p", ENGINE)],
                "auth": {"keys": [{"tenant": "acme", "key": KEYS["acme"]}], "admin_key": ADMIN_KEY}}
    with gateway_on(settings, upstreams, tmp_path) as gateway:
        for credentials in (None, f"Bearer {KEYS['acme']}", "Bearer sk-admin-operator-8", ADMIN_KEY):
            headers = {"Authorization": credentials} if credentials else {}
            refused = gateway.get("/metrics", headers=headers)
            assert refused.status_code == 401 and "auth.admin_key" in refused.json()["error"]["message"]
            probe = gateway.get("/ready", headers=headers)
            assert probe.status_code == 200 and probe.json() == {"status": "ready"}  # probes still work
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        assert "prefixgate_requests_total" in gateway.get("/metrics", headers=admin).text
        assert gateway.get("/ready", headers=admin).json()["replicas"] == {ENGINE: True}
        assert gateway.get("/health").status_code == 200
