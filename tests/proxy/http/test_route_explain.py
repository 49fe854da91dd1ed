"""POST /admin/route/...: the replica a request would go to, which is the one it then goes to, with
nothing sent, counted or remembered; only for the admin key, for a tenant named in a header."""

from __future__ import annotations

from pathlib import Path

from tests.support.chat_body import chat_body
from tests.support.clock import FakeClock
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockReply, MockUpstreams

REPLICAS = [f"http://engine-{n}:8000/v1" for n in range(4)]
ADMIN = {"Authorization": "Bearer admin-key-123"}
KEYS = {"alpha": "key-alpha-123", "beta": "key-beta-4567"}
EXPLAIN = "/admin/route/v1/chat/completions"


def _config(**auth: object) -> dict[str, object]:
    return {"pools": [{"name": "chat", "replicas": REPLICAS, "models": ["m"], "engine_metrics": {"interval": 0},
                       "health": {"interval": 0}}],
            "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()],
                     "cache_salt_secret": "explain-test-salt-secret", **auth}}


def _chat(app: int) -> dict[str, object]:
    return chat_body(f"You are the assistant of app {app}. " + "Answer briefly. " * 40, f"Question {app}?",
                     max_tokens=2)


def _served_by(upstreams: MockUpstreams) -> str:
    return upstreams.posts()[-1].url.removesuffix("/chat/completions")


def test_each_request_goes_where_the_explanation_said_and_the_explanation_sends_and_counts_nothing(
        tmp_path: Path) -> None:
    upstreams = MockUpstreams(MockEngine())
    with in_memory_gateway(_config(admin_key="admin-key-123"), upstreams, FakeClock(), tmp_path) as client:
        said, served = [], []
        for app in range(12):
            for tenant in KEYS:  # the same prompt under two tenants' salts: two keys on the ring
                explained = client.post(EXPLAIN, json=_chat(app), headers={**ADMIN, "x-prefixgate-tenant": tenant})
                assert explained.status_code == 200, explained.text
                said.append(explained.json()["replica"])
                before = len(upstreams.posts())
                metrics = client.get("/metrics", headers=ADMIN).text
                assert len(upstreams.posts()) == before  # nothing went upstream for the explanation
                assert sample_sum(metrics, "prefixgate_replica_choices_total") == len(served)
                assert sample_sum(metrics, "prefixgate_requests_total") == len(served)
                answer = client.post("/v1/chat/completions", json=_chat(app),
                                     headers={"Authorization": f"Bearer {KEYS[tenant]}"})
                assert answer.status_code == 200
                served.append(_served_by(upstreams))
        last = explained.json()
    assert said == served
    assert len(set(served)) > 1  # a test where every prompt lands on one replica would prove nothing
    assert last["pool"] == "chat" and last["tenant"] == "beta" and last["reason"] == "home"
    assert [r["url"] for r in last["replicas"]] == REPLICAS
    assert all(r["in_flight"] == 0 and r["healthy"] for r in last["replicas"])


def test_the_explanation_is_the_admins_and_names_a_tenant_of_the_gateway(tmp_path: Path) -> None:
    with in_memory_gateway(_config(admin_key="admin-key-123"), MockUpstreams(MockEngine()), FakeClock(),
                           tmp_path) as client:
        tenant_key = {"Authorization": f"Bearer {KEYS['alpha']}", "x-prefixgate-tenant": "alpha"}
        refused = client.post(EXPLAIN, json=_chat(1), headers=tenant_key)
        assert refused.status_code == 401 and "auth.admin_key" in refused.json()["error"]["message"]
        missing = client.post(EXPLAIN, json=_chat(1), headers=ADMIN)
        assert missing.status_code == 400
        assert missing.json()["error"]["param"] == "x-prefixgate-tenant"
        assert missing.json()["error"]["code"] == "missing_tenant"
        unknown = client.post(EXPLAIN, json=_chat(1), headers={**ADMIN, "x-prefixgate-tenant": "gamma"})
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "unknown_tenant"
        invalid = client.post(EXPLAIN, json={"model": "m", "messages": "hi"},
                              headers={**ADMIN, "x-prefixgate-tenant": "alpha"})
        assert invalid.status_code == 400 and invalid.json()["error"]["param"] == "messages"
        other_model = client.post(EXPLAIN, json={**_chat(1), "model": "n"},
                                  headers={**ADMIN, "x-prefixgate-tenant": "alpha"})
        assert other_model.status_code == 404


def test_an_open_gateway_explains_for_its_one_tenant_and_says_when_no_replica_is_healthy(tmp_path: Path) -> None:
    settings = {"pools": [{"name": "chat", "replicas": REPLICAS[:2], "models": ["m"], "engine_metrics": {"interval": 0},
                           "health": {"interval": 0, "eject_after": 1, "backoff": 30.0}, "retries": 1}]}

    def down(url: str, body: bytes) -> MockReply:
        return MockReply.json({"error": "down"}, status=503)

    with in_memory_gateway(settings, MockUpstreams(down), FakeClock(), tmp_path) as client:
        assert client.post(EXPLAIN, json=_chat(1)).json()["reason"] in ("home", "warm", "spilled")
        client.post("/v1/chat/completions", json=_chat(1))  # both replicas fail it: both ejected
        shed = client.post(EXPLAIN, json=_chat(1))
        assert shed.status_code == 503 and "Retry-After" in shed.headers


def test_completions_are_explained_too(tmp_path: Path) -> None:
    upstreams = MockUpstreams(MockEngine())
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 2}
    with in_memory_gateway(_config(admin_key="admin-key-123"), upstreams, FakeClock(), tmp_path) as client:
        said = client.post("/admin/route/v1/completions", json=body,
                           headers={**ADMIN, "x-prefixgate-tenant": "alpha"}).json()["replica"]
        client.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {KEYS['alpha']}"})
    assert upstreams.posts()[-1].url == said + "/completions"
