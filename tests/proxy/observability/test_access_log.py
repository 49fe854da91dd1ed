"""The access log: one JSON line per request, what an operator needs and no prompt content."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

import proxy.observability.access_log as access_log_module
from proxy.observability.access_log import AccessLog
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.waiting import wait_until

KEY = "sk-acme-0123456789"
SECRET_QUESTION = "what is the launch code for project nightingale?"


def _lines(path: Path, count: int, timeout: float = 5) -> list[dict[str, Any]]:
    """The log's lines once there are at least ``count`` (a writer thread writes them off the event loop)."""

    def read() -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []

    def enough() -> list[dict[str, Any]] | None:
        lines = read()
        return lines if len(lines) >= count else None

    return wait_until(enough, timeout=timeout, what=f"{count} access log lines in {path}", state=read)


def _config(fake: FakeServer, path: Path, **log: Any) -> dict[str, Any]:
    return {"pools": [pool("p", fake.base_url)], "auth": {"keys": [{"tenant": "acme", "key": KEY}]},
            "access_log": {"enabled": True, "path": str(path), **log}}


def _chat(proxy: str, key: str = KEY, **extra: Any) -> httpx.Response:
    body = {"model": "fake-model", "max_tokens": 4, "messages": [
        {"role": "system", "content": "Today is 2026-11-23. You are helpful."},
        {"role": "user", "content": SECRET_QUESTION}], **extra}
    return httpx.post(proxy + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                      timeout=10)


def test_each_request_leaves_one_line_with_who_where_how_long_and_no_prompt(
        start_proxy: Callable[..., str], fake: FakeServer, tmp_path: Path) -> None:
    path = tmp_path / "access.jsonl"
    proxy = start_proxy(_config(fake, path))
    assert _chat(proxy).status_code == 200
    assert _chat(proxy, stream=True, stream_options={"include_usage": True}).status_code == 200
    assert _chat(proxy, key="sk-nobody-0123456789").status_code == 401
    assert _chat(proxy, max_tokens=-1).status_code == 400
    plain, streamed, unknown, invalid = _lines(path, 4)
    assert plain["tenant"] == "acme" and plain["pool"] == "p" and plain["replica"] == fake.base_url
    assert plain["status"] == 200 and plain["model"] == "fake-model" and plain["stream"] is False
    assert plain["prompt_tokens"] > 0 and plain["completion_tokens"] > 0
    assert plain["relocated"] == 1  # the date left the system prompt
    assert {"request", "canonicalize", "upstream"} <= set(plain["stage_ms"])
    assert plain["duration_ms"] >= plain["stage_ms"]["upstream"] > 0
    assert streamed["stream"] is True and 0 < streamed["ttft_ms"] <= streamed["duration_ms"]
    assert streamed["completion_tokens"] > 0
    assert unknown["status"] == 401 and unknown["pool"] == "none" and "tenant" not in unknown
    assert invalid["status"] == 400 and invalid["tenant"] == "acme" and invalid["param"] == "max_tokens"
    assert SECRET_QUESTION.encode() not in path.read_bytes()


def test_the_debug_flag_adds_the_body_as_sent_upstream(start_proxy: Callable[..., str], fake: FakeServer,
                                                        tmp_path: Path) -> None:
    path = tmp_path / "access.jsonl"
    proxy = start_proxy(_config(fake, path, prompts=True))
    assert _chat(proxy).status_code == 200
    (line,) = _lines(path, 1)
    sent = line["body"]["messages"]
    assert sent[-1]["content"].startswith(SECRET_QUESTION)  # the tail note follows the question
    assert "2026-11-23" not in sent[0]["content"]  # the rewritten prompt, not the client's


def test_the_log_never_waits_on_its_reader_and_counts_what_it_drops(monkeypatch, tmp_path: Path) -> None:
    """A writer that is not draining (never started here) lets the log queue up to its bound; past
    it, lines are dropped, and the next line written after a drain says how many."""
    monkeypatch.setattr(access_log_module, "MAX_PENDING", 3)
    log = AccessLog(str(tmp_path / "access.jsonl"))
    started = time.perf_counter()
    for n in range(10):
        log.write({"n": n})
    assert time.perf_counter() - started < 1
    log._pending.clear()  # as the writer thread would, once it drains
    log.write({"n": 10})
    assert orjson.loads(log._pending[0]) == {"n": 10, "dropped_before": 7}
