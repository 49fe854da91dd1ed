"""The prompt policy as the upstream sees it: canonical prefix, volatile facts in the tail note."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from policies.prompt.prompt import NOTE_HEADER
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import sample_sum

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


def test_a_tenant_strips_ids_and_still_relocates_the_clock(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "auth": {"keys": [{"tenant": "lean", "key": "key-lean-1"}, {"tenant": "plain", "key": "key-plain-1"}]},
        "tenants": {"lean": {"prompt": {"actions": {"id": "strip"}}}},
    })
    answer = httpx.post(gateway + "/v1/chat/completions", json=body(), headers={"Authorization": "Bearer key-lean-1"})
    assert answer.status_code == 200 and answer.headers["x-prefixgate-relocated"] == "2"
    seen = fake.app.stats.last_body
    assert seen["messages"][0]["content"] == "You are a planner.\nPlan well."
    assert seen["messages"][1]["content"] == f"Plan my day.\n\n{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC"
    httpx.post(gateway + "/v1/chat/completions", json=body(), headers={"Authorization": "Bearer key-plain-1"})
    assert fake.app.stats.last_body["messages"][1]["content"].endswith("\nrequest_id=req8ZtQ2xLm9Q")


def test_requests_with_nothing_to_change_are_not_rewritten(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({"pools": [pool("p", fake.base_url, models=["fake-model"])]})
    raw = b'{"model":"fake-model","messages":[{"role":"user","content":"  hi  "}],"max_tokens":2, "seed": 1}'
    answer = httpx.post(gateway + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert answer.headers["x-prefixgate-relocated"] == "0"
    assert fake.app.stats.last_body["messages"][0]["content"] == "  hi  "


def test_stable_prefix_metric_sees_what_the_rewrite_saves(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    rules = "\n".join(f"Rule {n}: be precise about item {n}." for n in range(40))
    gateway = start_proxy({
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "auth": {"keys": [{"tenant": "moving", "key": "key-moving-1"}, {"tenant": "keeping", "key": "key-keeping-1"}]},
        "tenants": {"keeping": {"prompt": {"volatile": "keep"}}},
    })
    for minute in (51, 52):
        system = f"Current time: 2026-11-22 11:{minute}:13 UTC\n{rules}"
        for tenant in ("moving", "keeping"):
            answer = httpx.post(gateway + "/v1/chat/completions", json=body(system),
                                headers={"Authorization": f"Bearer key-{tenant}-1"})
            assert answer.status_code == 200
    metrics = httpx.get(gateway + "/metrics").text
    # Second request of each tenant: the relocating one shares its whole system prompt (~1,300 chars),
    # the one that keeps the clock line only its role marker and "Current time: 2026-11-22 11:5" (37 chars).
    assert sample_sum(metrics, "prefixgate_stable_prefix_tokens_sum", tenant="moving") > 300
    assert sample_sum(metrics, "prefixgate_stable_prefix_tokens_sum", tenant="keeping") == 37 // 4
    assert sample_sum(metrics, "prefixgate_stable_prefix_ratio_bucket", tenant="moving", le="0.75") == 1  # the first
    assert sample_sum(metrics, "prefixgate_volatile_spans_moved_total", tenant="moving") == 2
    assert sample_sum(metrics, "prefixgate_volatile_spans_moved_total", tenant="keeping") == 0


def test_tenant_template_gives_variants_one_prefix(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "auth": {"keys": [{"tenant": "acme", "key": "key-acme-123"}, {"tenant": "globex", "key": "key-globex-1"}]},
        "prompt": {"cache_salt": "share", "templates": [
            {"name": "support", "text": "You are {agent}, the support agent of {company}."}]},
    })
    seen = []
    for key, system in (("key-acme-123", "You are Max, the support agent of ACME.\nBe kind."),
                        ("key-globex-1", "You are Sam,  the support agent of Globex.\nBe kind.")):
        answer = httpx.post(gateway + "/v1/chat/completions", json=body(system),
                            headers={"Authorization": f"Bearer {key}"})
        assert answer.headers["x-prefixgate-templated"] == "1"
        assert fake.app.stats.last_body is not None
        seen.append(fake.app.stats.last_body["messages"])
    assert seen[0][0] == seen[1][0] == {"role": "system",
                                        "content": "You are [agent], the support agent of [company].\nBe kind."}
    assert seen[1][1]["content"].endswith("[agent] = Sam\n[company] = Globex")


def test_only_a_tenant_that_opts_in_gets_its_tools_sorted(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({
        "pools": [pool("p", fake.base_url, models=["fake-model"])],
        "auth": {"keys": [{"tenant": "sorted", "key": "key-sorted-1"}, {"tenant": "plain", "key": "key-plain-1"}]},
        "tenants": {"sorted": {"prompt": {"sort_tools": True}}},
    })
    tools = [{"type": "function", "function": {"name": "zeta", "parameters": {"properties": {"y": {}, "x": {}}}}},
             {"type": "function", "function": {"name": "alpha"}}]
    for key, names in (("key-sorted-1", ["alpha", "zeta"]), ("key-plain-1", ["zeta", "alpha"])):
        answer = httpx.post(gateway + "/v1/chat/completions", json=body(tools=tools),
                            headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200
        seen = fake.app.stats.last_body["tools"]
        assert [tool["function"]["name"] for tool in seen] == names
        assert list(seen[names.index("zeta")]["function"]["parameters"]["properties"]) == ["y", "x"]
