"""prefixgate's metrics as an operator's Prometheus sees them: a real Prometheus (Debian's package)
scrapes prefixgate and the real vLLM engine behind it, and its query API answers the dashboard's
questions about traffic this test sent."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.dashboard import DEPLOY
from tests.support.embedded import Embedded
from tests.support.metrics_text import sample_sum
from tests.support.prometheus_server import PrometheusServer, prometheus

pytestmark = pytest.mark.engine

STREAMS = 6
TTFT = "prefixgate_time_to_first_token_seconds"


def _until(value: Callable[[], float | None], wanted: Callable[[float], bool], seconds: float = 30) -> float | None:
    deadline = time.monotonic() + seconds
    seen = value()
    while not (seen is not None and wanted(seen)) and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = value()
    return seen


def _stream(embedded: Embedded, turn: int) -> None:
    body = {"model": embedded.model, "max_tokens": 8, "stream": True, "temperature": 0,
            "messages": [{"role": "system", "content": "You answer questions about the warehouse."},
                         {"role": "user", "content": f"Where is pallet {turn}?"}]}
    with httpx.stream("POST", embedded.proxy + "/v1/chat/completions", json=body, timeout=120) as answer:
        assert answer.status_code == 200
        assert b"data: [DONE]" in answer.read()


def test_prometheus_stores_the_ttft_histogram_of_traffic_through_the_real_engine(
    embedded: Embedded, tmp_path: Path
) -> None:
    with prometheus(tmp_path, {"prefixgate": embedded.proxy, "vllm": embedded.engine}) as server:
        assert _until(lambda: float(set(server.targets_up().values()) == {"up"}), bool) == 1.0, server.targets_up()
        for turn in range(STREAMS):
            _stream(embedded, turn)
        # What prefixgate itself reports now (the session's earlier tests streamed too) ...
        own = httpx.get(embedded.proxy + "/metrics").text
        count = sample_sum(own, TTFT + "_count")
        assert count >= STREAMS
        # ... is what Prometheus stored, bucket by bucket.
        stored = _until(lambda: server.scalar(f"sum({TTFT}_count)"), lambda v: v == count)
        assert stored == count
        assert server.scalar(f'sum({TTFT}_bucket{{le="+Inf"}})') == count
        p50 = server.scalar(f"histogram_quantile(0.5, sum by (le) ({TTFT}_bucket))")
        assert p50 is not None and 0 < p50 < 60 and math.isfinite(p50)
        # The engine's own series sit beside prefixgate's, so dashboards can put them together.
        assert server.scalar(f'sum({TTFT}_count{{job="prefixgate"}})') == count
        assert (server.scalar('sum(vllm:request_success_total{job="vllm"})') or 0) >= STREAMS
        _every_dashboard_query_is_valid_promql(server)


def _every_dashboard_query_is_valid_promql(server: PrometheusServer) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "prefixgate-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            answer = server.query(target["expr"])
            assert answer["status"] == "success", (panel["title"], target["expr"], answer)
