"""POST /admin/route/...: the replica a request would go to, which is the one it then goes to, with
nothing sent, counted or remembered; only for the admin key, for a tenant named in a header."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

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


def _messages_engine(url: str, body: bytes) -> MockReply:
    """vLLM's Messages API in memory beside its chat API."""
    if url.endswith("/messages"):
        return MockReply.json({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
                               "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}})
    return MockEngine()(url, body)


def _claude(session: int) -> dict[str, object]:
    """A Claude Code turn: the long system prompt every session of the agent shares, the session's own question."""
    return {"model": "m", "max_tokens": 4, "system": [{"type": "text", "text": "You are a coding agent. " * 60}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": f"Session {session}: fix it."}]}]}


def test_a_claude_code_request_is_explained_with_the_session_that_keyed_the_ring(tmp_path: Path) -> None:
    upstreams = MockUpstreams(_messages_engine)
    sessions = [f"7f3c{n:04d}-6bb7-5429-bb59-a30ea7fcdd56" for n in range(8)]
    with in_memory_gateway(_config(admin_key="admin-key-123"), upstreams, FakeClock(), tmp_path) as client:
        said, served = [], []
        for number, session in enumerate(sessions):
            named = {"x-claude-code-session-id": session}
            explained = client.post("/admin/route/v1/messages", json=_claude(number),
                                    headers={"x-api-key": "admin-key-123", "x-prefixgate-tenant": "alpha", **named})
            assert explained.status_code == 200, explained.text
            answer = explained.json()
            assert (answer["session"], answer["keyed_by"], answer["pool"]) == (session, "session", "chat")
            assert all(r["in_flight"] == 0 for r in answer["replicas"])  # the explanation holds no slot
            assert len(upstreams.posts()) == len(served)  # and sends nothing
            metrics = client.get("/metrics", headers=ADMIN).text
            assert sample_sum(metrics, "prefixgate_replica_choices_total") == len(served)
            assert sample_sum(metrics, "prefixgate_requests_total") == len(served)
            said.append(answer["replica"])
            sent = client.post("/v1/messages", json=_claude(number), headers={"x-api-key": KEYS["alpha"], **named})
            assert sent.status_code == 200, sent.text
            served.append(upstreams.posts()[-1].url.removesuffix("/messages"))
        user = orjson.dumps({"device_id": "d", "session_id": sessions[0]}).decode()  # Claude Code's metadata.user_id
        by_metadata = client.post("/admin/route/v1/messages", json={**_claude(9), "metadata": {"user_id": user}},
                                  headers={**ADMIN, "x-prefixgate-tenant": "alpha"}).json()
        unnamed = client.post("/admin/route/v1/messages", json=_claude(0),
                              headers={**ADMIN, "x-prefixgate-tenant": "alpha"}).json()
    assert said == served
    assert len(set(served)) > 1  # the sessions spread; keyed by the shared prompt they would all go to one
    assert (by_metadata["session"], by_metadata["keyed_by"], by_metadata["replica"]) == (sessions[0], "session",
                                                                                         said[0])
    assert (unnamed["session"], unnamed["keyed_by"]) == (None, "prefix")


def test_the_messages_explainer_refuses_in_anthropics_shape(tmp_path: Path) -> None:
    settings = {"pools": [{"name": "chat", "replicas": REPLICAS[:1], "models": ["m"], "engine_metrics": {"interval": 0},
                           "health": {"interval": 0, "eject_after": 1, "backoff": 30.0}, "retries": 0}],
                "auth": {"keys": [{"tenant": "alpha", "key": KEYS["alpha"]}], "admin_key": "admin-key-123"}}

    def down(url: str, body: bytes) -> MockReply:
        return MockReply.json({"type": "error", "error": {"type": "api_error", "message": "down"}}, status=500)

    def error(answer: httpx.Response) -> dict[str, object]:
        body = answer.json()
        assert body["type"] == "error" and set(body) == {"type", "error"}, body
        return dict(body["error"])

    explain = "/admin/route/v1/messages"
    tenant = {**ADMIN, "x-prefixgate-tenant": "alpha"}
    with in_memory_gateway(settings, MockUpstreams(down), FakeClock(), tmp_path) as client:
        invalid = client.post(explain, json={**_claude(1), "messages": [{"role": "user"}]}, headers=tenant)
        assert invalid.status_code == 400
        assert error(invalid)["type"] == "invalid_request_error" and "'messages[0].content'" in str(error(invalid))
        no_cap = client.post(explain, json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                             headers=tenant)
        assert no_cap.status_code == 400 and "'max_tokens'" in str(error(no_cap))
        not_admin = client.post(explain, json=_claude(1), headers={"x-api-key": KEYS["alpha"],
                                                                    "x-prefixgate-tenant": "alpha"})
        assert not_admin.status_code == 401 and error(not_admin)["type"] == "authentication_error"
        assert error(client.post(explain, json=_claude(1), headers=ADMIN))["type"] == "invalid_request_error"
        unknown_model = client.post(explain, json={**_claude(1), "model": "n"}, headers=tenant)
        assert unknown_model.status_code == 404 and error(unknown_model)["type"] == "not_found_error"
        client.post("/v1/messages", json=_claude(1), headers={"x-api-key": KEYS["alpha"]})  # its one replica ejected
        overloaded = client.post(explain, json=_claude(1), headers=tenant)
        assert overloaded.status_code == 529 and error(overloaded)["type"] == "overloaded_error"
        assert "Retry-After" in overloaded.headers
        chat = client.post(EXPLAIN, json={"model": "m", "messages": "hi"}, headers=tenant)
        assert chat.status_code == 400 and chat.json()["error"]["param"] == "messages"  # chat's stay OpenAI's


def test_a_responses_turn_is_explained_and_its_stored_conversation_is_read_without_being_kept(
        tmp_path: Path) -> None:
    def engine(url: str, body: bytes) -> MockReply:
        return MockReply.json({"id": "resp_1", "object": "response", "model": "m", "status": "completed",
                               "output": [], "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}})

    clock = FakeClock()
    upstreams = MockUpstreams(engine)
    config = {**_config(admin_key="admin-key-123"), "responses": {"ttl_s": 100}}
    tenant = {**ADMIN, "x-prefixgate-tenant": "alpha"}
    with in_memory_gateway(config, upstreams, clock, tmp_path) as client:
        first = client.post("/v1/responses", json={"model": "m", "input": "Plan the trip."},
                            headers={"Authorization": f"Bearer {KEYS['alpha']}"})
        assert first.status_code == 200, first.text
        turn = {"model": "m", "input": "And the way back?", "previous_response_id": first.json()["id"]}
        clock.advance(90)
        explained = client.post("/admin/route/v1/responses", json=turn, headers=tenant)
        assert explained.status_code == 200, explained.text
        assert explained.json()["replica"] in REPLICAS and len(upstreams.posts()) == 1
        clock.advance(20)  # past the stored turn's expiry, which the explanation did not move
        gone = client.post("/admin/route/v1/responses", json=turn, headers=tenant)
        assert gone.status_code == 404 and gone.json()["error"]["param"] == "previous_response_id"
