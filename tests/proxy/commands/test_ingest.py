"""`prefixgate ingest` and `prefixgate migrate-store` as a user runs them beside a gateway."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.vector_store import SearchMode
from tests.support.old_store import old_format_folder


def _ingest(tmp_path: Path, tenant: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, with an empty config: no keys, so every request is tenant 'default'."""
    document = tmp_path / "returns.md"
    document.write_text("# Returns\n\nItems may be returned within 30 days.")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")},
           "PREFIXGATE_DATA_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "proxy", "ingest", str(document), "--tenant", tenant, *options],
                          capture_output=True, text=True, env=env, timeout=300)


def _migrate(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")},
           "PREFIXGATE_DATA_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "proxy", "migrate-store"], capture_output=True, text=True, env=env,
                          timeout=120)


async def test_ingest_stores_the_chunks_and_says_how_fast(tmp_path: Path) -> None:
    done = _ingest(tmp_path, "default")
    assert done.returncode == 0 and "ingested 1 documents as 1 chunks" in done.stdout, done
    assert re.search(r" in \d+\.\d s: \d+\.\d documents/s, \d+\.\d chunks/s$", done.stdout.strip()), done.stdout
    assert re.search(r"ingest: 100%.*doc/s, \d+\.\d chunks/s\]", done.stderr), done.stderr  # the progress bar
    store = EdgeStore.open(tmp_path / "qdrant", dimensions=384)
    try:
        assert await store.count("prefixgate", "default") == 1
    finally:
        await store.aclose()


async def test_ingest_beside_a_serving_gateway_reaches_it_at_its_next_poll(tmp_path: Path) -> None:
    """A gateway holds the folder open and searches it; an ingest in another process still works, and the
    gateway reads the new chunks once it polls, without a restart."""
    gateway = EdgeStore.open(tmp_path / "qdrant", dimensions=384)
    try:
        await gateway.ensure_collection("prefixgate", "default")
        assert await gateway.search("prefixgate", "default", [0.05] * 384, 5) == []
        done = _ingest(tmp_path, "default", "--quiet")
        assert done.returncode == 0, done
        versions = await gateway.versions()
        assert ("prefixgate", "default") in versions
        hits = await gateway.search("prefixgate", "default", [0.05] * 384, 5)
        assert [hit.text for hit in hits] == ["# Returns\n\nItems may be returned within 30 days."]
    finally:
        await gateway.aclose()


def test_ingest_into_a_folder_of_the_previous_store_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    old_format_folder(tmp_path / "qdrant")
    done = _ingest(tmp_path, "default", "--quiet")
    assert done.returncode == 1 and done.stdout == "", done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # no traceback, and nothing from loading the embedding model first
    assert lines[0].startswith("prefixgate ingest: ") and "prefixgate migrate-store" in lines[0], lines[0]


def test_ingest_for_a_tenant_no_key_names_says_so_too(tmp_path: Path) -> None:
    old_format_folder(tmp_path / "qdrant")
    done = _ingest(tmp_path, "acme")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    warning, error = lines
    assert "no API key in this config names tenant 'acme'" in warning and "prefixgate migrate-store" in error


async def test_migrate_store_copies_the_old_folder_so_the_gateway_finds_what_it_found_before(tmp_path: Path) -> None:
    old_format_folder(tmp_path / "qdrant")
    done = _migrate(tmp_path)
    assert done.returncode == 0 and "migrated 1 chunks of 1 tenant collections" in done.stdout, done
    store = EdgeStore.open(tmp_path / "qdrant", dimensions=384)
    try:
        await store.versions()  # as a gateway worker reads them at start, copying the collections
        hits = await store.search("prefixgate", "default", [0.05] * 384, 5, text="returned", mode=SearchMode(1, 1))
        assert [hit.text for hit in hits] == ["Items may be returned within 30 days."]
        assert await store.search("prefixgate", "acme", [0.05] * 384, 5) == []  # the tenant came with its chunk
    finally:
        await store.aclose()
    again = _migrate(tmp_path)
    assert again.returncode == 0 and "nothing to migrate" in again.stdout, again
