"""Agent sessions choose their replica: eight sessions of one agent (the same long system prompt, different
turns) spread over a pool's two replicas, each session keeping to one, whichever way it names itself (Claude
Code's header or ``metadata.user_id``, Codex's header, OpenAI's ``prompt_cache_key``); without a name, the
prompt's first characters send all of them to one replica."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockReply, MockUpstreams

A, B = "http://a:8000/v1", "http://b:8000/v1"
SYSTEM = "You are a coding agent. " * 200  # the prefix every session shares
SESSIONS = [f"7f3c{n:04d}-6bb7-5429-bb59-a30ea7fcdd56" for n in range(8)]


def engine(url: str, body: bytes) -> MockReply:
    if url.endswith("/messages"):
        return MockReply.json({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
                               "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}})
    return MockEngine()(url, body)


@pytest.fixture
def upstreams() -> MockUpstreams:
    return MockUpstreams(engine)


@pytest.fixture
def client(upstreams: MockUpstreams, tmp_path: Path) -> Iterator[TestClient]:
    config = {"pools": [pool("p", A, B, models=["m"], health={"interval": 0}, engine_metrics={"interval": 0})],
              "auth": {"cache_salt_secret": "salt-secret-0123456789"}}
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        yield client


def _turn(session: str, turn: int, how: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """One turn of ``session``, named the way ``how`` says (or not at all)."""
    question = {"role": "user", "content": f"Turn {turn} of {session}: fix the bug."}
    if how == "chat prompt_cache_key":
        return "/v1/chat/completions", {"model": "m", "max_tokens": 4, "prompt_cache_key": session,
                                        "messages": [{"role": "system", "content": SYSTEM}, question]}, {}
    body = {"model": "m", "max_tokens": 4, "system": SYSTEM, "messages": [question]}
    if how == "claude header":
        return "/v1/messages", body, {"x-claude-code-session-id": session}
    if how == "claude metadata":
        user = orjson.dumps({"device_id": "d", "account_uuid": "", "session_id": session}).decode()
        return "/v1/messages", {**body, "metadata": {"user_id": user}}, {}
    if how == "codex header":
        return "/v1/messages", body, {"session-id": session}
    return "/v1/messages", body, {}


def _replicas(client: TestClient, upstreams: MockUpstreams, how: str) -> dict[str, set[str]]:
    """The replicas each session's three turns went to."""
    went: dict[str, set[str]] = {}
    for turn in range(3):
        for session in SESSIONS:
            path, body, headers = _turn(session, turn, how)
            assert client.post(path, json=body, headers=headers).status_code == 200
            went.setdefault(session, set()).add(upstreams.posts()[-1].url.rsplit("/v1", 1)[0])
    return went


@pytest.mark.parametrize("how", ["claude header", "claude metadata", "codex header", "chat prompt_cache_key"])
def test_named_sessions_spread_over_the_replicas_and_each_keeps_to_one(
        client: TestClient, upstreams: MockUpstreams, how: str) -> None:
    went = _replicas(client, upstreams, how)
    assert all(len(replicas) == 1 for replicas in went.values()), went
    assert set().union(*went.values()) == {"http://a:8000", "http://b:8000"}


def test_unnamed_sessions_of_one_agent_all_go_where_their_shared_prefix_does(
        client: TestClient, upstreams: MockUpstreams) -> None:
    went = _replicas(client, upstreams, "unnamed")
    assert len(set().union(*went.values())) == 1
