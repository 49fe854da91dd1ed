"""A real Prometheus (Debian's package) on a free loopback port, scraping the targets a test names
every second, with its HTTP query API for the test to ask what it stored."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from proxy.engine.process import free_port
from tests.support.processes import ended


@contextmanager
def prometheus(workdir: Path, targets: dict[str, str]) -> Iterator[PrometheusServer]:
    """Prometheus scraping ``targets`` (job name -> origin; each one's /metrics) once a second."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed: `apt-get install prometheus` (make test does it)")
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [origin.split("://", 1)[1]]}]}
                           for job, origin in targets.items()],
    }))
    log = open(workdir / "prometheus.log", "wb")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    server = PrometheusServer(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while not server.ready():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prometheus did not start:\n" + (workdir / "prometheus.log").read_text()[-2000:])
            time.sleep(0.2)
        yield server
    finally:
        try:
            ended(process, timeout=20)
        finally:
            log.close()


class PrometheusServer:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def ready(self) -> bool:
        try:
            return httpx.get(self.origin + "/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, promql: str) -> dict[str, Any]:
        """The API's whole answer (status, data or error) for an instant query."""
        return httpx.get(self.origin + "/api/v1/query", params={"query": promql}, timeout=10).json()

    def scalar(self, promql: str) -> float | None:
        """The single value an instant query returns, or None while it returns nothing."""
        answer = self.query(promql)
        assert answer["status"] == "success", answer
        result = answer["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def targets_up(self) -> dict[str, str]:
        """Job name -> health of its target's last scrape (up, down, unknown)."""
        answer = httpx.get(self.origin + "/api/v1/targets", timeout=10).json()
        return {t["labels"]["job"]: t["health"] for t in answer["data"]["activeTargets"]}
