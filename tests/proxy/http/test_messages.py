"""POST /v1/messages (Anthropic's Messages API) through the gateway in memory: what the engine receives (the
billing block dropped, canonical system text, the note on the last user turn, the harness reminder's date
moved, tools and blocks byte for byte, the tenant's salt), the answer relayed as it came (whole, or SSE to
``message_stop``), Anthropic's errors before and after the first byte, the token budget settled with cached
tokens counted, and ``/v1/messages/count_tokens`` forwarded as sent."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from policies.prompt.cache_salt import tenant_salt
from policies.prompt.prompt import NOTE_HEADER
from proxy.wire.anthropic_errors import PING
from tests.support.clock import FakeClock, settle
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_transport import MockReply, MockUpstreams

A = "http://a:8000/v1"
ACME, GLOBEX = "sk-acme-0123456789", "sk-globex-0123456789"
SECRET = "salt-secret-0123456789"
QUIET = {"models": ["m"], "health": {"interval": 0}, "engine_metrics": {"interval": 0}}
HOSTED = {"name": "hosted", "kind": "litellm", "models": ["hosted"], "litellm_model": "openai/model",
          "api_base": "http://hosted.invalid/v1", "api_key": "sk-provider"}
BILLING = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=cli; cch=9f2e1;"}
SYSTEM = [BILLING, {"type": "text", "text": "You are a coding agent.\n"},
          {"type": "text", "text": "Be brief.   \r\nCurrent time: 2026-11-22 11:51:13 UTC\n",
           "cache_control": {"type": "ephemeral"}}]
REMINDER = "<system-reminder>\nToday's date is 2026-11-28.\n</system-reminder>\n"
TOOLS = [{"name": "Read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {
    "path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]}},
    {"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}}]
USAGE = {"input_tokens": 4, "cache_read_input_tokens": 16, "output_tokens": 3}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + orjson.dumps({"type": name, **data}) + b"\n\n"


class Engine:
    """vLLM's Messages API in memory: "Done." in Anthropic's JSON or events (the last one cut in two across
    chunks; ``last_event=False``: a stream that ends without it); 20 prompt tokens, 16 of them cached."""

    def __init__(self) -> None:
        self.last_event = True
        self.error = False

    def __call__(self, url: str, body: bytes) -> MockReply:
        request = orjson.loads(body)
        if url.endswith("/messages/count_tokens"):
            return MockReply.json({"input_tokens": 20})
        if self.error:
            return MockReply.json({"type": "error", "error": {"type": "BadRequestError", "message": "too long"}}, 400)
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": request["model"],
                   "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "usage": USAGE}
        if not request.get("stream"):
            return MockReply.json(message)
        start = {**message, "content": [], "stop_reason": None, "usage": {**USAGE, "output_tokens": 0}}
        chunks = [_event("message_start", {"message": start}),
                  _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                  _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Done."}}),
                  _event("content_block_stop", {"index": 0}),
                  _event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": USAGE})]
        if self.last_event:
            last = _event("message_stop", {})
            chunks += [last[:11], last[11:]]
        return MockReply(200, chunks, content_type="text/event-stream")


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def upstreams(engine: Engine) -> MockUpstreams:
    return MockUpstreams(engine)


@pytest.fixture
def client(upstreams: MockUpstreams, tmp_path: Path) -> Iterator[TestClient]:
    config = {
        "pools": [pool("p", A, **QUIET), HOSTED],
        "auth": {"keys": [{"tenant": "acme", "key": ACME}, {"tenant": "globex", "key": GLOBEX}],
                 "cache_salt_secret": SECRET},
        "limits": {"max_tokens": 64},
        "tenants": {"globex": {"limits": {"max_tokens_action": "reject"}}},
    }
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        yield client


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 32, "system": SYSTEM, "tools": TOOLS, "messages": [
        {"role": "user", "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": "Fix the bug."}]}],
        **fields}


def _create(client: TestClient, key: str = ACME, path: str = "/v1/messages", **fields: Any) -> httpx.Response:
    return client.post(path, json=_body(**fields), headers={"x-api-key": key, "anthropic-version": "2023-06-01"})


def _sent(upstreams: MockUpstreams, index: int = -1) -> dict[str, Any]:
    return orjson.loads(upstreams.posts()[index].body)


def _events(answer: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in answer.content.split(b"\n\n"):
        if block.strip():
            lines = dict(line.split(b": ", 1) for line in block.split(b"\n"))
            found.append((lines[b"event"].decode(), orjson.loads(lines[b"data"])))
    return found


def test_the_engine_receives_the_prompt_without_the_billing_block_with_canonical_system_text_and_the_note(
        client: TestClient, upstreams: MockUpstreams) -> None:
    answer = _create(client)
    assert answer.status_code == 200 and answer.json()["content"] == [{"type": "text", "text": "Done."}]
    assert answer.headers["x-prefixgate-relocated"] == "2"  # the clock line and the reminder's date
    assert upstreams.posts()[-1].url == A + "/messages"
    sent = _sent(upstreams)
    assert sent["system"] == [{"type": "text", "text": "You are a coding agent.\n"},
                              {"type": "text", "text": "Be brief.\n", "cache_control": {"type": "ephemeral"}}]
    assert sent["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nToday's date is [ref 1].\n</system-reminder>\n"},
        {"type": "text", "text": "Fix the bug."},
        {"type": "text", "text": f"{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC\n[ref 1] = 2026-11-28"}]}]
    assert sent["cache_salt"] == tenant_salt(SECRET.encode(), "acme")
    assert orjson.dumps(TOOLS) in upstreams.posts()[-1].body  # byte for byte, in the app's order


def test_tool_use_and_tool_result_blocks_reach_the_engine_as_sent(client: TestClient, upstreams: MockUpstreams) -> None:
    turns = [{"role": "user", "content": "Read main.py"},
             {"role": "assistant", "content": [{"type": "text", "text": "Reading."}, {
                 "type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "main.py", "limit": 5}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                           "content": "print('hi')", "cache_control": {"type": "ephemeral"}}]}]
    assert _create(client, system="You are a coding agent.", messages=turns).status_code == 200
    assert _sent(upstreams)["messages"] == turns and _sent(upstreams)["system"] == "You are a coding agent."


def test_a_stream_is_relayed_event_for_event_to_message_stop(client: TestClient) -> None:
    answer = _create(client, stream=True)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    names = [name for name, _ in _events(answer)]
    assert names == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]


def test_a_stream_without_message_stop_ends_in_an_anthropic_error_event(client: TestClient, engine: Engine) -> None:
    engine.last_event = False
    name, data = _events(_create(client, stream=True))[-1]
    assert name == "error" and data["type"] == "error" and data["error"]["type"] == "api_error"
    assert "broke off" in data["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_token_budget_is_settled_with_cached_prompt_tokens_counted(
        upstreams: MockUpstreams, tmp_path: Path, stream: bool) -> None:
    """Each call uses 23 tokens: 4 input, 16 read from the cache (Anthropic counts them apart), 3 output."""
    config = {"pools": [pool("p", A, **QUIET)], "auth": {"keys": [{"tenant": "acme", "key": ACME}]},
              "limits": {"tokens_per_minute": 10_000}}
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        remaining = [int(_create(client, stream=stream).headers["x-ratelimit-remaining-tokens"]) for _ in range(3)]
        metrics = client.get("/metrics").text
    assert [before - after for before, after in pairwise(remaining)] == [23, 23]
    assert sample_sum(metrics, "prefixgate_tokens_total", tenant="acme", kind="prompt") == 60
    assert sample_sum(metrics, "prefixgate_tokens_total", tenant="acme", kind="completion") == 9


def _error(answer: httpx.Response) -> dict[str, Any]:
    body = answer.json()
    assert body["type"] == "error" and set(body) == {"type", "error"}, body
    return body["error"]


def test_refusals_are_anthropic_errors_that_name_the_field(client: TestClient, upstreams: MockUpstreams) -> None:
    missing = client.post("/v1/messages", json=_body())
    assert missing.status_code == 401 and _error(missing)["type"] == "authentication_error"
    role = _create(client, messages=[{"role": "tool", "content": "x"}])
    assert role.status_code == 400 and _error(role)["type"] == "invalid_request_error"
    assert "messages[0].role" in _error(role)["message"]
    body = _body()
    del body["max_tokens"]
    no_cap = client.post("/v1/messages", json=body, headers={"x-api-key": ACME})
    assert no_cap.status_code == 400 and "'max_tokens'" in _error(no_cap)["message"]
    over = _create(client, GLOBEX, max_tokens=1000)  # globex refuses caps above limits.max_tokens (64)
    assert over.status_code == 400 and "max_tokens" in _error(over)["message"]
    hosted = _create(client, model="hosted")
    assert hosted.status_code == 400 and "does not serve the Messages API" in _error(hosted)["message"]
    unknown = _create(client, model="nope")
    assert unknown.status_code == 404 and _error(unknown)["type"] == "not_found_error"
    assert upstreams.posts() == []


def test_the_cap_is_clamped_to_the_limit_for_tenants_that_clamp(client: TestClient, upstreams: MockUpstreams) -> None:
    assert _create(client, max_tokens=1000).status_code == 200
    assert _sent(upstreams)["max_tokens"] == 64


def test_an_engines_own_error_is_relayed_in_its_anthropic_shape(client: TestClient, engine: Engine) -> None:
    engine.error = True
    answer = _create(client)
    assert answer.status_code == 400 and _error(answer) == {"type": "BadRequestError", "message": "too long"}


def test_count_tokens_goes_to_the_engine_as_sent(client: TestClient, upstreams: MockUpstreams) -> None:
    answer = _create(client, path="/v1/messages/count_tokens")
    assert answer.status_code == 200 and answer.json() == {"input_tokens": 20}
    call = upstreams.posts()[-1]
    assert call.url == A + "/messages/count_tokens" and orjson.loads(call.body) == _body()
    refused = client.post("/v1/messages/count_tokens", json={"model": "m"}, headers={"x-api-key": ACME})
    assert refused.status_code == 400 and "'messages'" in _error(refused)["message"]


KEEPALIVE_S = 0.01


class SlowPrefill:
    """Every replica's transport: the engine's first byte comes three keep-alive intervals late on the app's clock."""

    def __init__(self, engine: Engine, clock: FakeClock) -> None:
        self.engine, self.clock = engine, clock

    def __call__(self, *, connect_timeout: float, headers: Any, max_connections: int, keepalive: float) -> SlowPrefill:
        return self

    async def post(self, url: str, body: bytes) -> MockReply:
        for _ in range(3):
            self.clock.advance(KEEPALIVE_S)
            await settle()
        return self.engine(url, body)

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        return 404, b""

    async def aclose(self) -> None:
        pass


def test_a_waiting_stream_is_kept_alive_with_ping_events_and_ends_at_message_stop(
        engine: Engine, tmp_path: Path) -> None:
    clock = FakeClock()
    config = {"pools": [pool("p", A, stream_keepalive=KEEPALIVE_S, **QUIET)]}
    with in_memory_gateway(config, SlowPrefill(engine, clock), clock, tmp_path) as client:  # type: ignore[arg-type]
        answer = _create(client, stream=True)
        engine.last_event = False
        broken = _create(client, stream=True)
    names = [name for name, _ in _events(answer)]
    assert names[0] == "ping" and names[-1] == "message_stop" and "message_start" in names
    assert answer.content.startswith(PING)
    assert [name for name, _ in _events(broken)][-1] == "error"
