"""The prompt policy as the upstream sees it: canonical prefix, volatile facts in the tail note."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from policies.prompt import NOTE_HEADER
from tests.conftest import FakeServer, pool

SYSTEM = "You are a planner.  \r\nCurrent time: 2026-11-22 11:51:13 UTC\r\nrequest_id=req8ZtQ2xLm9Q\r\nPlan well."


def body(system: str = SYSTEM, **extra: object) -> dict[str, object]:
    return {"model": "fake-model", "max_tokens": 4,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Plan my day."}], **extra}


def test_upstream_receives_the_canonical_prefix_and_the_note(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({"pools": [pool("p", fake.base_url, models=["fake-model"])]})
    for stream in (False, True):
        answer = httpx.post(gateway + "/v1/chat/completions", json=body(stream=stream))
        assert answer.status_code == 200
        assert answer.headers["x-prefixgate-relocated"] == "2"
        assert answer.headers["x-prefixgate-volatile"] == "2"
        seen = fake.app.stats.last_body
        assert seen is not None
        assert seen["messages"][0]["content"] == "You are a planner.\nPlan well."
        assert seen["messages"][1]["content"] == (
            f"Plan my day.\n\n{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC\nrequest_id=req8ZtQ2xLm9Q"
        )
        assert seen["stream"] is stream and seen["max_tokens"] == 4  # every other field passes through


def test_policy_from_config_keep_and_custom_pattern(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "prompt": {"volatile": "keep", "canonical": False, "patterns": [{"name": "ticket", "regex": r"TICKET-\d+"}]},
    })
    system = "Work on TICKET-42.\nCurrent time: 2026-11-22 11:51"
    answer = httpx.post(gateway + "/v1/chat/completions", json=body(system))
    assert answer.headers["x-prefixgate-volatile"] == "2" and answer.headers["x-prefixgate-relocated"] == "0"
    assert fake.app.stats.last_body["messages"][0]["content"] == system


def test_requests_with_nothing_to_change_are_not_rewritten(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({"pools": [pool("p", fake.base_url, models=["fake-model"])]})
    raw = b'{"model":"fake-model","messages":[{"role":"user","content":"  hi  "}],"max_tokens":2, "seed": 1}'
    answer = httpx.post(gateway + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert answer.headers["x-prefixgate-relocated"] == "0"
    assert fake.app.stats.last_body["messages"][0]["content"] == "  hi  "
