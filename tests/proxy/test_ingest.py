"""`prefixgate ingest` as a user runs it beside a gateway: what it says when it cannot work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from proxy.vector_store import VectorStore


def test_ingest_beside_a_process_holding_the_folder_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    """The embedded store is a folder one process opens at a time (here the test holds it, as a running
    gateway would). Tenant acme is named by no key of the (empty) config: that is said too."""
    document = tmp_path / "returns.md"
    document.write_text("# Returns\n\nItems may be returned within 30 days.")
    gateway_store = VectorStore.open(dimensions=384, path=tmp_path / "qdrant")
    try:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")},
               "PREFIXGATE_DATA_DIR": str(tmp_path)}
        done = subprocess.run([sys.executable, "-m", "proxy.cli", "ingest", str(document), "--tenant", "acme",
                               "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    finally:
        gateway_store.client.sync.close()
    lines = [line for line in done.stderr.splitlines() if line.startswith("prefixgate ingest:")]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 2, done.stderr
    assert "no API key in this config names tenant 'acme'" in lines[0]
    assert "is in use by another process" in lines[1] and "retrieval.qdrant_url" in lines[1]
