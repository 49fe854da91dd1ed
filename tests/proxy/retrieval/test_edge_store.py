"""The embedded engine's folder shared by processes: gateways read, ingests write, nothing half-done shows.

Each test runs the writer in a real second process (``tests.support.edge_writer``), as a user runs
`prefixgate ingest` beside a serving gateway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.generations import GRACE_S, Generations, folder_name
from tests.support.edge_writer import stored_chunk

ROOT = Path(__file__).resolve().parents[3]


def start_writer(folder: Path, doc_id: str, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.support.edge_writer", str(folder), doc_id, str(seconds)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_written(writer: subprocess.Popen[str]) -> None:
    assert writer.stdout is not None
    line = writer.stdout.readline()
    assert line.strip() == "written", (line, writer.stderr.read() if writer.stderr else "")


def finish(writer: subprocess.Popen[str]) -> int:
    writer.communicate(timeout=60)
    return writer.returncode


async def doc_ids(store: EdgeStore) -> list[str]:
    await store.versions()  # a gateway's poll: moves to the newest published generation
    return sorted(hit.doc_id for hit in await store.search("docs", "acme", [1.0, 0.0, 0.0], 10))


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[EdgeStore]:
    """A gateway's store over a collection that holds the document "before"."""
    store = EdgeStore.open(tmp_path / "qdrant", dimensions=3)
    await store.upsert("docs", "acme", [stored_chunk("before", [1.0, 0.0, 0.0])])
    yield store
    await store.aclose()


async def test_an_ingest_killed_midway_loses_no_document_stored_before_and_blocks_no_next_ingest(
        gateway: EdgeStore) -> None:
    writer = start_writer(gateway.path, "killed", 60)
    wait_written(writer)
    writer.send_signal(signal.SIGKILL)  # as kill -9, or the machine losing power
    finish(writer)
    assert await doc_ids(gateway) == ["before"]  # the killed run's chunk was never published
    await gateway.upsert("docs", "acme", [stored_chunk("after", [1.0, 0.0, 0.0])])  # its lock died with it
    assert await doc_ids(gateway) == ["after", "before"]
    folder = gateway.root / folder_name("docs")
    generations = sorted(p.name for p in folder.iterdir() if p.name.startswith("g"))
    assert generations == ["g000000001", "g000000002"], generations  # the killed run's copy made way for the next


async def test_two_ingests_of_one_collection_take_turns_and_both_land(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    first = start_writer(folder, "first", 2)
    wait_written(first)  # holds the writer's lock for two more seconds
    second = start_writer(folder, "second", 0)
    began = time.monotonic()
    assert finish(second) == 0 and finish(first) == 0
    assert time.monotonic() - began > 1  # the second waited for the first instead of copying beside it
    store = EdgeStore.open(folder, dimensions=3)
    try:
        assert await doc_ids(store) == ["first", "second"]
    finally:
        await store.aclose()


async def test_a_gateway_searches_while_another_process_ingests(gateway: EdgeStore) -> None:
    writer = start_writer(gateway.path, "during", 2)
    wait_written(writer)
    assert await doc_ids(gateway) == ["before"]  # the ingest under way is not visible yet, and not in the way
    assert finish(writer) == 0
    assert await doc_ids(gateway) == ["before", "during"]


def test_superseded_generations_stay_for_readers_that_have_not_looked_yet(tmp_path: Path) -> None:
    generations = Generations(tmp_path / "docs")
    with generations.writer_lock():
        for _ in range(5):
            generations.publish(generations.begin())
    names = lambda: sorted(p.name for p in generations.root.iterdir() if p.name.startswith("g"))  # noqa: E731
    published = (generations.root / "CURRENT").stat().st_mtime
    generations.clear_leftovers(now=published + 1)
    assert names() == ["g000000003", "g000000004", "g000000005"]  # two back, for readers mid-poll
    generations.clear_leftovers(now=published + GRACE_S + 1)
    assert names() == ["g000000005"]
    os.makedirs(generations.root / "g000000006")  # a writer that died before publishing
    generations.clear_leftovers(now=published + 1)
    assert names() == ["g000000005"]
