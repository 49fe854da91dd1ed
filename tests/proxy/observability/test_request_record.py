"""What one request leaves behind: one access-log line (the body only when asked) and its metrics, once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from time import perf_counter
from typing import Any

import orjson
import pytest

from proxy.observability.access_log import AccessLog
from proxy.observability.metrics import Metrics
from proxy.observability.request_record import RequestRecord
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until

A = "http://a:8000/v1"
ROUTE = "/chat/completions"
SENT = b'{"model":"m","messages":[{"role":"user","content":"the launch code, please"}]}'


@pytest.fixture
def metrics() -> Metrics:
    metrics = Metrics()
    metrics.label_tenants(["acme"], 10)
    return metrics


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Callable[..., AccessLog]]:
    """Start an access log writing to tmp_path/access.jsonl (its writer thread); closed after the test."""
    logs: list[AccessLog] = []

    def start(**settings: Any) -> AccessLog:
        log = AccessLog(str(tmp_path / "access.jsonl"), **settings)
        log.start()
        logs.append(log)
        return log

    yield start
    for log in logs:
        log.close()


def _lines(path: Path, count: int) -> list[dict[str, Any]]:
    """The log's lines once its writer thread has written ``count`` of them."""

    def read() -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []

    def enough() -> list[dict[str, Any]] | None:
        lines = read()
        return lines if len(lines) >= count else None

    return wait_until(enough, timeout=5, what=f"{count} lines in {path}", state=read)


def _prepared(metrics: Metrics, log: AccessLog | None, *, stream: bool = False) -> RequestRecord:
    """A record through the route's steps: authenticated as acme, read, its pool chosen."""
    record = RequestRecord(metrics, log, ROUTE)
    record.tenant("acme")
    mark = record.stage("auth", record.started)
    record.stage("request", mark)
    record.note(model="m", stream=stream)
    record.pool = "p"
    return record


def test_an_answer_leaves_one_line_with_status_pool_replica_tokens_and_stage_times(
        metrics: Metrics, open_log: Callable[..., AccessLog], tmp_path: Path) -> None:
    log = open_log()
    record = _prepared(metrics, log)
    record.called(200, replica=A, usage=(5, 3), taken_at=perf_counter(), streamed=None, body=SENT)
    (line,) = _lines(tmp_path / "access.jsonl", 1)
    log.close()  # writes whatever else was queued: nothing
    assert len((tmp_path / "access.jsonl").read_bytes().splitlines()) == 1
    assert {key: line[key] for key in ("route", "tenant", "model", "stream", "pool", "replica", "status")} == {
        "route": ROUTE, "tenant": "acme", "model": "m", "stream": False, "pool": "p", "replica": A, "status": 200}
    assert line["prompt_tokens"] == 5 and line["completion_tokens"] == 3
    assert set(line["stage_ms"]) == {"auth", "request", "upstream"}
    assert line["duration_ms"] >= line["stage_ms"]["upstream"] >= 0
    assert "ttft_ms" not in line and "body" not in line
    assert b"launch code" not in (tmp_path / "access.jsonl").read_bytes()


def test_a_stream_adds_its_time_to_first_token(metrics: Metrics, open_log: Callable[..., AccessLog],
                                               tmp_path: Path) -> None:
    record = _prepared(metrics, open_log(), stream=True)
    record.started -= 2.0  # it arrived 2 s ago; its first chunk came 0.5 s after, the last 1.5 s after that
    record.called(200, replica=A, usage=(5, 3), taken_at=record.started + 0.1, streamed=1.5, body=SENT)
    (line,) = _lines(tmp_path / "access.jsonl", 1)
    assert line["stream"] is True
    assert 500 <= line["ttft_ms"] < 1000 and line["duration_ms"] >= 2000


def test_a_refused_request_leaves_a_line_with_its_error_and_no_pool(
        metrics: Metrics, open_log: Callable[..., AccessLog], tmp_path: Path) -> None:
    record = RequestRecord(metrics, open_log(), ROUTE)
    record.note(error="invalid_api_key", param=None)
    record.answered(401)
    (line,) = _lines(tmp_path / "access.jsonl", 1)
    assert line["status"] == 401 and line["error"] == "invalid_api_key" and line["pool"] == "none"
    assert "tenant" not in line and "replica" not in line


def test_the_body_as_sent_is_logged_only_with_prompts_on(metrics: Metrics, open_log: Callable[..., AccessLog],
                                                         tmp_path: Path) -> None:
    record = _prepared(metrics, open_log(prompts=True))
    record.called(200, replica=A, usage=(5, 3), taken_at=perf_counter(), streamed=None, body=SENT)
    (line,) = _lines(tmp_path / "access.jsonl", 1)
    assert line["body"] == orjson.loads(SENT)


def test_an_answer_is_observed_in_the_metrics_once(metrics: Metrics) -> None:
    record = _prepared(metrics, None)  # the log off: metrics still written
    record.called(200, replica=A, usage=(5, 3), taken_at=perf_counter(), streamed=1.0, body=SENT)
    text = metrics.render().decode()
    assert sample_sum(text, "prefixgate_requests_total", route=ROUTE, tenant="acme", pool="p", status="200") == 1
    assert sample_sum(text, "prefixgate_request_duration_seconds_count", route=ROUTE, status="200") == 1
    assert sample_sum(text, "prefixgate_stage_seconds_count", stage="upstream") == 1
    assert sample_sum(text, "prefixgate_stage_seconds_count", stage="auth") == 1
    assert sample_sum(text, "prefixgate_tokens_total", tenant="acme", pool="p", kind="prompt") == 5
    assert sample_sum(text, "prefixgate_tokens_total", tenant="acme", pool="p", kind="completion") == 3
    assert sample_sum(text, "prefixgate_time_per_output_token_seconds_sum", pool="p") == pytest.approx(0.5)


def test_a_failed_or_refused_request_counts_as_a_request_and_no_tokens(metrics: Metrics) -> None:
    failed = _prepared(metrics, None)
    failed.called(502, replica=A, usage=(None, None), taken_at=perf_counter(), streamed=None, body=SENT)
    RequestRecord(metrics, None, ROUTE).answered(401)  # before authentication: tenant and pool "none"
    other = RequestRecord(metrics, None, ROUTE)
    other.tenant("zeta")  # a tenant without a label of its own
    other.answered(429)
    text = metrics.render().decode()
    assert sample_sum(text, "prefixgate_requests_total", tenant="acme", pool="p", status="502") == 1
    assert sample_sum(text, "prefixgate_requests_total", tenant="none", pool="none", status="401") == 1
    assert sample_sum(text, "prefixgate_requests_total", tenant="other", status="429") == 1
    assert sample_sum(text, "prefixgate_requests_total") == 3
    assert sample_sum(text, "prefixgate_tokens_total") == 0
