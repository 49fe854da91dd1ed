"""What one generation request leaves behind: its metrics and, when the access log is on, its line.

A ``RequestRecord`` travels with the request from the route to the upstream call, so the stages
the route times and what the call learns (status, replica, usage, time to first token) end up in
one access-log line and one set of metric observations, written once when the request ends.
"""

from __future__ import annotations

from time import perf_counter, time
from typing import Any

import orjson

from proxy.observability.access_log import AccessLog
from proxy.observability.metrics import Metrics


class RequestRecord:
    __slots__ = ("counted", "entry", "label", "log", "metrics", "pool", "route", "started")

    def __init__(self, metrics: Metrics, log: AccessLog | None, route: str, *, counted: bool = True) -> None:
        self.started = perf_counter()
        self.counted = counted  # False: a request only explained (the admin route), whose stages count nothing
        self.metrics = metrics
        self.log = log
        self.route = route
        self.label = "none"  # the tenant's metric label, once authenticated
        self.pool = "none"  # the pool's name, once chosen
        self.entry: dict[str, Any] | None = None if log is None else {"ts": round(time(), 3), "route": route}

    def tenant(self, name: str) -> None:
        if self.counted:
            self.label = self.metrics.tenant_label(name)
        if self.entry is not None:
            self.entry["tenant"] = name

    def note(self, **fields: Any) -> None:
        """Fields of the access-log line (nothing when the log is off)."""
        if self.entry is not None:
            self.entry.update(fields)

    def stage(self, name: str, since: float) -> float:
        """A stage that began at ``since`` (its metric, and its place in the log line); returns now."""
        now = perf_counter()
        if self.counted:
            self.metrics.observe_stage(name, now - since)
        if self.entry is not None:
            self.entry.setdefault("stage_ms", {})[name] = round((now - since) * 1000, 3)
        return now

    def answered(self, status: int) -> None:
        """The request ended without an upstream exchange: refused, or answered from the answer cache."""
        seconds = perf_counter() - self.started
        self.metrics.observe_request(self.route, status, seconds, self.label, self.pool)
        if self.entry is not None and self.log is not None:
            self.entry.update(status=status, pool=self.pool, duration_ms=round(seconds * 1000, 3))
            self.log.write(self.entry)

    def called(self, status: int, *, replica: str | None, usage: tuple[int | None, int | None],
               taken_at: float | None, streamed: float | None, body: bytes) -> None:
        """The upstream call ended: ``taken_at`` when a replica first took it, ``streamed`` seconds from
        a stream's first chunk to its last, ``body`` as sent upstream (logged only with prompts on)."""
        ended = perf_counter()
        self.metrics.observe_request(self.route, status, ended - self.started, self.label, self.pool)
        if taken_at is not None:
            self.metrics.observe_stage("upstream", ended - taken_at)
        if status == 200:
            self.metrics.observe_answer(self.label, self.pool, *usage, streamed)
        entry = self.entry
        if entry is None or self.log is None:
            return
        entry.update(status=status, pool=self.pool, replica=replica, prompt_tokens=usage[0],
                     completion_tokens=usage[1], duration_ms=round((ended - self.started) * 1000, 3))
        if taken_at is not None:
            entry.setdefault("stage_ms", {})["upstream"] = round((ended - taken_at) * 1000, 3)
        if streamed is not None:
            entry["ttft_ms"] = round((ended - self.started - streamed) * 1000, 3)
        if self.log.prompts:
            entry["body"] = orjson.Fragment(body)  # as sent upstream, not parsed again
        self.log.write(entry)
