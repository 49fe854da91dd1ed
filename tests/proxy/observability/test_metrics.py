"""What /metrics tells an operator about requests: by tenant (bounded), pool and status; tokens;
time per output token; where the time went by stage."""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import sample_sum


def _tenant_labels(text: str, metric: str) -> set[str]:
    return set(re.findall(metric + r'\{[^}]*tenant="([^"]*)"', text))


def _chat(proxy: str, key: str, **extra: object) -> httpx.Response:
    body = {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **extra}
    return httpx.post(proxy + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                      timeout=10)


def test_a_thousand_tenants_make_a_bounded_number_of_series(fake: FakeServer,
                                                           start_proxy: Callable[..., str]) -> None:
    """1,000 keys, each its own tenant, each sending a request: only the labelled tenants get their
    own series; the rest are counted, all of them, as other."""
    keys = [{"tenant": f"tenant-{n:04d}", "key": f"sk-metrics-{n:04d}"} for n in range(1000)]
    proxy = start_proxy({"pools": [pool("p", fake.base_url)], "auth": {"keys": keys},
                         "limits": {"requests_per_minute": 10},  # tenant-labelled rate-limit series too
                         "metrics": {"max_tenants": 20}})
    with ThreadPoolExecutor(16) as threads:
        statuses = list(threads.map(lambda n: _chat(proxy, f"sk-metrics-{n:04d}").status_code, range(1000)))
    assert statuses == [200] * 1000
    assert _chat(proxy, "sk-wrong-key-0000").status_code == 401
    text = httpx.get(proxy + "/metrics").text
    labels = _tenant_labels(text, "prefixgate_requests_total")
    assert labels == {f"tenant-{n:04d}" for n in range(20)} | {"other", "none"}  # none: refused before auth
    assert sample_sum(text, "prefixgate_requests_total", tenant="other", status="200") == 980
    assert sample_sum(text, "prefixgate_requests_total", status="200") == 1000
    assert len(_tenant_labels(text, "prefixgate_stable_prefix_tokens_count")) == 21
    assert len(_tenant_labels(text, "prefixgate_tokens_total")) == 21


def test_tenants_named_in_config_are_the_only_labelled_ones(fake: FakeServer,
                                                            start_proxy: Callable[..., str]) -> None:
    keys = [{"tenant": name, "key": f"sk-metrics-{name}"} for name in ("acme", "globex", "initech")]
    proxy = start_proxy({"pools": [pool("p", fake.base_url)], "auth": {"keys": keys},
                         "metrics": {"tenants": ["acme"]}})
    for name in ("acme", "globex", "initech"):
        assert _chat(proxy, f"sk-metrics-{name}").status_code == 200
    text = httpx.get(proxy + "/metrics").text
    assert _tenant_labels(text, "prefixgate_requests_total") == {"acme", "other"}
    assert sample_sum(text, "prefixgate_requests_total", tenant="other", pool="p", status="200") == 2


def test_tokens_and_time_per_output_token_come_from_the_answers(fake: FakeServer,
                                                                 start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url)]})
    assert _chat(proxy, "x", fake_tokens=5, max_tokens=8).status_code == 200  # JSON: usage 12 prompt, 5 completion
    with httpx.stream("POST", proxy + "/v1/chat/completions", timeout=10, json={
            "model": "fake-model", "stream": True, "fake_tokens": 8, "fake_delay_ms": 20,
            "stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": "hi"}]}) as reply:
        assert reply.status_code == 200
        assert sum(1 for line in reply.iter_lines() if line.startswith("data: {")) >= 8
    text = httpx.get(proxy + "/metrics").text
    assert sample_sum(text, "prefixgate_tokens_total", pool="p", kind="prompt") == 24
    assert sample_sum(text, "prefixgate_tokens_total", pool="p", kind="completion") == 13
    # One stream: 8 tokens 20 ms apart, so about 20 ms per token after the first.
    assert sample_sum(text, "prefixgate_time_per_output_token_seconds_count", pool="p") == 1
    per_token = sample_sum(text, "prefixgate_time_per_output_token_seconds_sum", pool="p")
    assert 0.015 < per_token < 0.2, per_token


def test_stage_timings_cover_each_request(fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url)], "limits": {"requests_per_minute": 100}})
    for _ in range(3):
        assert _chat(proxy, "x", fake_delay_ms=30, fake_tokens=2).status_code == 200
    assert _chat(proxy, "x", max_tokens=-1).status_code == 400  # refused: no stage past the request's own
    text = httpx.get(proxy + "/metrics").text
    for stage in ("canonicalize", "admission", "upstream"):
        assert sample_sum(text, "prefixgate_stage_seconds_count", stage=stage) == 3, stage
    assert sample_sum(text, "prefixgate_stage_seconds_count", stage="request") == 3
    assert sample_sum(text, "prefixgate_stage_seconds_count", stage="auth") == 4  # the refused one too
    # The upstream stage holds the engine's time (two tokens 30 ms apart), the others are prefixgate's own.
    assert sample_sum(text, "prefixgate_stage_seconds_sum", stage="upstream") > 0.03 * 3
    assert sample_sum(text, "prefixgate_stage_seconds_sum", stage="canonicalize") < 0.03 * 3
