"""The prompt policy as the upstream sees it: canonical prefix, volatile facts in the tail note.

The gateway runs in memory (``in_memory_gateway``); what the upstream saw is what ``MockUpstreams`` recorded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from starlette.testclient import TestClient

from policies.prompt.prompt import NOTE_HEADER
from tests.support.chat_body import chat_body
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockUpstreams

SYSTEM = "You are a planner.  \r\nCurrent time: 2026-11-22 11:51:13 UTC\r\nrequest_id=req8ZtQ2xLm9Q\r\nPlan well."
ENGINE = "http://engine:8000/v1"


def body(system: str = SYSTEM, **extra: object) -> dict[str, object]:
    return chat_body(system, "Plan my day.", model="fake-model", max_tokens=4, **extra)


@dataclass
class Gateway:
    """An in-memory gateway and the engine behind it, which records every body it is sent."""

    client: TestClient
    upstreams: MockUpstreams

    def last_body(self) -> dict[str, Any]:
        """The body of the last request the engine received."""
        sent: dict[str, Any] = orjson.loads(self.upstreams.posts()[-1].body)
        return sent


@contextmanager
def gateway(tmp_path: Path, **settings: object) -> Iterator[Gateway]:
    """A gateway with one pool serving fake-model, and ``settings`` added to its config."""
    upstreams = MockUpstreams(MockEngine())
    config = {"pools": [pool("p", ENGINE, models=["fake-model"])], **settings}
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        yield Gateway(client, upstreams)


def test_upstream_receives_the_canonical_prefix_and_the_note(tmp_path: Path) -> None:
    with gateway(tmp_path) as started:
        for stream in (False, True):
            answer = started.client.post("/v1/chat/completions", json=body(stream=stream))
            assert answer.status_code == 200
            assert answer.headers["x-prefixgate-relocated"] == "2"
            assert answer.headers["x-prefixgate-volatile"] == "2"
            seen = started.last_body()
            assert seen["messages"][0]["content"] == "You are a planner.\nPlan well."
            assert seen["messages"][1]["content"] == (
                f"Plan my day.\n\n{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC\nrequest_id=req8ZtQ2xLm9Q"
            )
            assert seen["stream"] is stream and seen["max_tokens"] == 4  # every other field passes through


def test_policy_from_config_keep_and_custom_pattern(tmp_path: Path) -> None:
    prompt = {"volatile": "keep", "canonical": False, "patterns": [{"name": "ticket", "regex": r"TICKET-\d+"}]}
    with gateway(tmp_path, prompt=prompt) as started:
        system = "Work on TICKET-42.\nCurrent time: 2026-11-22 11:51"
        answer = started.client.post("/v1/chat/completions", json=body(system))
        assert answer.headers["x-prefixgate-volatile"] == "2" and answer.headers["x-prefixgate-relocated"] == "0"
        assert started.last_body()["messages"][0]["content"] == system


def test_a_tenant_strips_ids_and_still_relocates_the_clock(tmp_path: Path) -> None:
    with gateway(tmp_path,
                 auth={"keys": [{"tenant": "lean", "key": "key-lean-1"}, {"tenant": "plain", "key": "key-plain-1"}]},
                 tenants={"lean": {"prompt": {"actions": {"id": "strip"}}}}) as started:
        answer = started.client.post("/v1/chat/completions", json=body(),
                                     headers={"Authorization": "Bearer key-lean-1"})
        assert answer.status_code == 200 and answer.headers["x-prefixgate-relocated"] == "2"
        seen = started.last_body()
        assert seen["messages"][0]["content"] == "You are a planner.\nPlan well."
        assert seen["messages"][1]["content"] == (
            f"Plan my day.\n\n{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC")
        started.client.post("/v1/chat/completions", json=body(), headers={"Authorization": "Bearer key-plain-1"})
        assert started.last_body()["messages"][1]["content"].endswith("\nrequest_id=req8ZtQ2xLm9Q")


def test_requests_with_nothing_to_change_are_not_rewritten(tmp_path: Path) -> None:
    with gateway(tmp_path) as started:
        raw = b'{"model":"fake-model","messages":[{"role":"user","content":"  hi  "}],"max_tokens":2, "seed": 1}'
        answer = started.client.post("/v1/chat/completions", content=raw,
                                     headers={"content-type": "application/json"})
        assert answer.headers["x-prefixgate-relocated"] == "0"
        assert started.last_body()["messages"][0]["content"] == "  hi  "


def test_stable_prefix_metric_sees_what_the_rewrite_saves(tmp_path: Path) -> None:
    rules = "\n".join(f"Rule {n}: be precise about item {n}." for n in range(40))
    with gateway(tmp_path, auth={"keys": [{"tenant": "moving", "key": "key-moving-1"},
                                          {"tenant": "keeping", "key": "key-keeping-1"}]},
                 tenants={"keeping": {"prompt": {"volatile": "keep"}}}) as started:
        for minute in (51, 52):
            system = f"Current time: 2026-11-22 11:{minute}:13 UTC\n{rules}"
            for tenant in ("moving", "keeping"):
                answer = started.client.post("/v1/chat/completions", json=body(system),
                                             headers={"Authorization": f"Bearer key-{tenant}-1"})
                assert answer.status_code == 200
        metrics = started.client.get("/metrics").text
    # Second request of each tenant: the relocating one shares its whole system prompt (~1,300 chars),
    # the one that keeps the clock line only its role marker and "Current time: 2026-11-22 11:5" (37 chars).
    assert sample_sum(metrics, "prefixgate_stable_prefix_tokens_sum", tenant="moving") > 300
    assert sample_sum(metrics, "prefixgate_stable_prefix_tokens_sum", tenant="keeping") == 37 // 4
    assert sample_sum(metrics, "prefixgate_stable_prefix_ratio_bucket", tenant="moving", le="0.75") == 1  # the first
    assert sample_sum(metrics, "prefixgate_volatile_spans_moved_total", tenant="moving") == 2
    assert sample_sum(metrics, "prefixgate_volatile_spans_moved_total", tenant="keeping") == 0


def test_tenant_template_gives_variants_one_prefix(tmp_path: Path) -> None:
    seen = []
    with gateway(tmp_path,
                 auth={"keys": [{"tenant": "acme", "key": "key-acme-123"},
                                {"tenant": "globex", "key": "key-globex-1"}]},
                 prompt={"cache_salt": "share", "templates": [
                     {"name": "support", "text": "You are {agent}, the support agent of {company}."}]}) as started:
        for key, system in (("key-acme-123", "You are Max, the support agent of ACME.\nBe kind."),
                            ("key-globex-1", "You are Sam,  the support agent of Globex.\nBe kind.")):
            answer = started.client.post("/v1/chat/completions", json=body(system),
                                         headers={"Authorization": f"Bearer {key}"})
            assert answer.headers["x-prefixgate-templated"] == "1"
            seen.append(started.last_body()["messages"])
    assert seen[0][0] == seen[1][0] == {"role": "system",
                                        "content": "You are [agent], the support agent of [company].\nBe kind."}
    assert seen[1][1]["content"].endswith("[agent] = Sam\n[company] = Globex")


def test_only_a_tenant_that_opts_in_gets_its_tools_sorted(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "zeta", "parameters": {"properties": {"y": {}, "x": {}}}}},
             {"type": "function", "function": {"name": "alpha"}}]
    with gateway(tmp_path,
                 auth={"keys": [{"tenant": "sorted", "key": "key-sorted-1"},
                                {"tenant": "plain", "key": "key-plain-1"}]},
                 tenants={"sorted": {"prompt": {"sort_tools": True}}}) as started:
        for key, names in (("key-sorted-1", ["alpha", "zeta"]), ("key-plain-1", ["zeta", "alpha"])):
            answer = started.client.post("/v1/chat/completions", json=body(tools=tools),
                                         headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200
            seen = started.last_body()["tools"]
            assert [tool["function"]["name"] for tool in seen] == names
            assert list(seen[names.index("zeta")]["function"]["parameters"]["properties"]) == ["y", "x"]
