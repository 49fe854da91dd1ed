"""`prefixgate ingest` while a gateway of several workers serves from the same embedded folder: no stop, no
restart, and within a poll every worker answers with the new document."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.gateways import gateway_processes
from tests.support.waiting import wait_until

PHRASE = "Orders ship from the Rotterdam warehouse within 36 hours."


def ask(origin: str) -> None:
    body = {"model": "fake-model", "max_tokens": 4,
            "messages": [{"role": "user", "content": "Where do orders ship from, and how fast?"}]}
    with httpx.Client(timeout=30) as client:  # a connection each, so the workers share the requests
        assert client.post(origin + "/v1/chat/completions", json=body).status_code == 200


def prompt_upstream(fake: FakeServer) -> str:
    return str(fake.app.stats.last_body["messages"])


def ingest(data_dir: Path, document: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")},
           "PREFIXGATE_DATA_DIR": str(data_dir)}
    done = subprocess.run([sys.executable, "-m", "proxy", "ingest", str(document), "--tenant", "default",
                           "--collection", "docs", "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr


def test_an_ingest_beside_a_serving_gateway_reaches_every_worker(fake: FakeServer, tmp_path: Path) -> None:
    config = {"server": {"workers": 2}, "pools": [pool("p", fake.base_url, models=["fake-model"])],
              "retrieval": {"version_poll_s": 0.2},
              "tenants": {"default": {"retrieval": {"collection": "docs"}}}}
    returns, shipping = tmp_path / "returns.md", tmp_path / "shipping.md"
    returns.write_text("# Returns\n\nItems may be returned within 30 days.")
    shipping.write_text(f"# Shipping\n\n{PHRASE}")
    ingest(tmp_path, returns)
    with gateway_processes(config, tmp_path, 1, timeout=180) as (origin,):
        for _ in range(6):
            ask(origin)  # every worker opens the collection as it is
        assert "returned within 30 days" in prompt_upstream(fake) and PHRASE not in prompt_upstream(fake)
        ingest(tmp_path, shipping)

        def every_worker_answers_with_it() -> bool:
            for _ in range(12):
                ask(origin)
                if PHRASE not in prompt_upstream(fake):
                    return False
            return True

        wait_until(every_worker_answers_with_it, timeout=30, interval=0.3,
                   what="every worker to retrieve the document ingested while it served")
