"""`prefixgate ingest` as a user runs it beside a gateway: what it says when it cannot work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from proxy.retrieval.vector_store import VectorStore


def _ingest(tmp_path: Path, tenant: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, with an empty config: no keys, so every request is tenant 'default'."""
    document = tmp_path / "returns.md"
    document.write_text("# Returns\n\nItems may be returned within 30 days.")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")},
           "PREFIXGATE_DATA_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "proxy", "ingest", str(document), "--tenant", tenant, *options],
                          capture_output=True, text=True, env=env, timeout=300)


def _ingest_beside_a_gateway(tmp_path: Path, tenant: str) -> subprocess.CompletedProcess[str]:
    """The embedded store is a folder one process opens at a time: the test holds it, as a running gateway
    would."""
    gateway_store = VectorStore.open(dimensions=384, path=tmp_path / "qdrant")
    try:
        return _ingest(tmp_path, tenant, "--quiet")
    finally:
        gateway_store.client.sync.close()


async def test_ingest_with_the_folder_free_stores_the_chunks_and_says_how_fast(tmp_path: Path) -> None:
    done = _ingest(tmp_path, "default")
    assert done.returncode == 0 and "ingested 1 documents as 1 chunks" in done.stdout, done
    assert re.search(r" in \d+\.\d s: \d+\.\d documents/s, \d+\.\d chunks/s$", done.stdout.strip()), done.stdout
    assert re.search(r"ingest: 100%.*doc/s, \d+\.\d chunks/s\]", done.stderr), done.stderr  # the progress bar
    store = VectorStore.open(dimensions=384, path=tmp_path / "qdrant")
    try:
        assert await store.count("prefixgate", "default") == 1
    finally:
        await store.aclose()


def test_ingest_beside_a_process_holding_the_folder_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    done = _ingest_beside_a_gateway(tmp_path, "default")
    assert done.returncode == 1 and done.stdout == "", done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # no traceback, and nothing from loading the embedding model first
    line = lines[0]
    assert line.startswith("prefixgate ingest: ") and "is in use by another process" in line, line
    assert "retrieval.qdrant_url" in line, line


def test_ingest_for_a_tenant_no_key_names_says_so_too(tmp_path: Path) -> None:
    done = _ingest_beside_a_gateway(tmp_path, "acme")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    warning, error = lines
    assert "no API key in this config names tenant 'acme'" in warning and "is in use by another process" in error
