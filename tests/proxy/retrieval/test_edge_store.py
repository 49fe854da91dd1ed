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
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.generations import Generations, folder_name
from tests.support.edge_writer import stored_chunk

ROOT = Path(__file__).resolve().parents[3]


class Writers:
    """Writer processes a test starts; the fixture ends any still running and closes their pipes, so a
    failed assert leaves nothing behind for the next test."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, folder: Path, doc_id: str, seconds: float) -> subprocess.Popen[str]:
        writer = subprocess.Popen([sys.executable, "-m", "tests.support.edge_writer", str(folder), doc_id,
                                   str(seconds)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.started.append(writer)
        return writer

    def close(self) -> None:
        for writer in self.started:
            if writer.poll() is None:
                writer.kill()
            writer.communicate()  # reaps it and closes its pipes


@pytest.fixture
def writers() -> Iterator[Writers]:
    started = Writers()
    yield started
    started.close()


def wait_written(writer: subprocess.Popen[str]) -> None:
    assert writer.stdout is not None
    line = writer.stdout.readline()
    assert line.strip() == "written", (line, writer.stderr.read() if writer.stderr else "")


def finish(writer: subprocess.Popen[str]) -> int:
    _, errors = writer.communicate(timeout=120)
    assert writer.returncode in (0, -signal.SIGKILL), errors
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
        gateway: EdgeStore, writers: Writers) -> None:
    writer = writers.start(gateway.path, "killed", 60)
    wait_written(writer)
    writer.send_signal(signal.SIGKILL)  # as kill -9, or the machine losing power
    finish(writer)
    assert await doc_ids(gateway) == ["before"]  # the killed run's chunk was never published
    await gateway.upsert("docs", "acme", [stored_chunk("after", [1.0, 0.0, 0.0])])  # its lock died with it
    assert await doc_ids(gateway) == ["after", "before"]
    folder = gateway.root / folder_name("docs")
    generations = sorted(p.name for p in folder.iterdir() if p.name.startswith("g"))
    assert generations == ["g000000001", "g000000002"], generations  # the killed run's copy made way for the next


async def test_two_ingests_of_one_collection_take_turns_and_both_land(tmp_path: Path, writers: Writers) -> None:
    folder = tmp_path / "qdrant"
    first = writers.start(folder, "first", 2)
    wait_written(first)  # holds the writer's lock for two more seconds
    second = writers.start(folder, "second", 0)
    began = time.monotonic()
    assert finish(second) == 0 and finish(first) == 0
    assert time.monotonic() - began > 1  # the second waited for the first instead of copying beside it
    store = EdgeStore.open(folder, dimensions=3)
    try:
        assert await doc_ids(store) == ["first", "second"]
    finally:
        await store.aclose()


async def test_a_gateway_searches_while_another_process_ingests(gateway: EdgeStore, writers: Writers) -> None:
    writer = writers.start(gateway.path, "during", 2)
    wait_written(writer)
    assert await doc_ids(gateway) == ["before"]  # the ingest under way is not visible yet, and not in the way
    assert finish(writer) == 0
    assert await doc_ids(gateway) == ["before", "during"]


def test_superseded_generations_go_unless_a_reader_is_copying_one(tmp_path: Path) -> None:
    generations = Generations(tmp_path / "docs")
    names = lambda: sorted(p.name for p in generations.root.iterdir() if p.name.startswith("g"))  # noqa: E731
    with generations.writer_lock():
        generations.publish(generations.begin())
        with generations.copying():  # a reader copying g1 right now
            generations.publish(generations.begin())
            generations.publish(generations.begin())
            assert names() == ["g000000001", "g000000002", "g000000003"]
        generations.publish(generations.begin())  # the next writer, with no reader copying, clears them
        assert names() == ["g000000003", "g000000004"]  # the one it copied goes with the writer after
        os.makedirs(generations.root / "g000000005")  # a writer that died before publishing
        generations.clear_leftovers()
        assert names() == ["g000000004"]
