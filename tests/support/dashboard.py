"""The deploy/ folder and the metric names its Grafana dashboard queries (checked against prefixgate's
/metrics in tests/deploy, against vLLM's in tests/integration)."""

from __future__ import annotations

import json
import re
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\b(prefixgate_[a-z_]+|vllm:[a-z_:]+)")


def dashboard_metrics(prefix: str) -> set[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "prefixgate-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in exprs for name in METRIC.findall(expr) if name.startswith(prefix)}
