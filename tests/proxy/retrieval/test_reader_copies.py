"""Each process searches its own copy of a published generation: made without filling the engine's
holes, removed when the process moves on or closes, and swept when the process was killed."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.generations import folder_name
from proxy.retrieval.reader_copies import READERS, sweep
from proxy.retrieval.sparse_copy import copy_tree
from proxy.retrieval.vector_store import MissingCollection
from tests.support.edge_writer import stored_chunk

ROOT = Path(__file__).resolve().parents[3]


def disk_bytes(folder: Path) -> int:
    return sum(path.stat().st_blocks * 512 for path in folder.rglob("*") if path.is_file())


def length(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@pytest.fixture
async def published(tmp_path: Path) -> Path:
    """A data folder whose collection "docs" holds one published document."""
    store = EdgeStore.open(tmp_path / "qdrant", dimensions=3)
    await store.upsert("docs", "acme", [stored_chunk("before", [1.0, 0.0, 0.0])])
    await store.aclose()
    return tmp_path / "qdrant"


@pytest.fixture
def reader_process(published: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen([sys.executable, "-m", "tests.support.edge_reader", str(published), "60", "hold"],
                               cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    yield process
    if process.poll() is None:
        process.kill()
    process.communicate()


def copies(folder: Path) -> list[str]:
    readers = folder / "edge" / folder_name("docs") / READERS
    return sorted(path.name for path in readers.iterdir() if path.is_dir()) if readers.is_dir() else []


def test_a_copy_keeps_every_byte_and_none_of_the_holes(published: Path, tmp_path: Path) -> None:
    generation = published / "edge" / folder_name("docs") / "g000000001"
    copy_tree(generation, tmp_path / "copy")
    assert length(generation) > 50 * disk_bytes(generation)  # the engine's files are mostly holes
    assert disk_bytes(tmp_path / "copy") <= 2 * disk_bytes(generation)
    for path in generation.rglob("*"):
        if path.is_file():
            assert (tmp_path / "copy" / path.relative_to(generation)).read_bytes() == path.read_bytes()


def test_where_the_kernel_refuses_to_copy_a_range_the_bytes_are_read_and_written(
        published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox's seccomp filter answers copy_file_range with EPERM: the copy still comes out whole and sparse."""
    def refused(*args: object) -> int:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "copy_file_range", refused)
    generation = published / "edge" / folder_name("docs") / "g000000001"
    copy_tree(generation, tmp_path / "copy")
    assert disk_bytes(tmp_path / "copy") <= 2 * disk_bytes(generation)
    for path in generation.rglob("*"):
        if path.is_file():
            assert (tmp_path / "copy" / path.relative_to(generation)).read_bytes() == path.read_bytes()


async def test_a_store_searches_its_own_copy_and_removes_it_when_it_closes(published: Path) -> None:
    store = EdgeStore.open(published, dimensions=3)
    try:
        assert copies(published) == []
        await store.versions()  # as a worker reads them at start: its copy, made off the search path
        assert len(copies(published)) == 1 and copies(published)[0].startswith("g000000001-")
        assert [hit.doc_id for hit in await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)] == ["before"]
        await store.upsert("docs", "acme", [stored_chunk("after", [1.0, 0.0, 0.0])])
        # its copy of the superseded generation went with the publish, a copy of the new one came with it
        assert len(copies(published)) == 1 and copies(published)[0].startswith("g000000002-")
        assert len(await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)) == 2
    finally:
        await store.aclose()
    assert copies(published) == []


async def test_the_copy_of_a_killed_worker_is_swept_by_the_next_one(
        published: Path, reader_process: subprocess.Popen[str]) -> None:
    readers = published / "edge" / folder_name("docs") / READERS
    assert reader_process.stdout is not None and reader_process.stdout.readline().strip() == "holding"
    reader_process.send_signal(signal.SIGKILL)
    reader_process.wait(30)
    left = copies(published)
    assert left  # kill -9 left its copy behind
    store = EdgeStore.open(published, dimensions=3)
    try:
        await store.versions()
        assert not set(left) & set(copies(published))  # swept when this worker made its own
        assert len(copies(published)) == 1
    finally:
        await store.aclose()
    assert sorted(path.name for path in readers.iterdir()) == []


def test_a_lock_being_made_is_not_swept_but_one_left_a_minute_ago_is(tmp_path: Path) -> None:
    temporary = tmp_path / ".g000000001-1-ab.lock.tmp"  # another process between creating and locking it
    temporary.touch()
    made = temporary.stat().st_mtime
    sweep(tmp_path, now=made + 1)
    assert temporary.exists()
    sweep(tmp_path, now=made + 61)  # its process died before renaming it
    assert not temporary.exists()


async def test_a_search_never_copies_a_collection_the_poll_then_does(published: Path) -> None:
    """A collection published since this process last read the versions is missing to a search for that moment
    (no copy made on the request's path: a big collection takes seconds); the next poll copies it off the path."""
    store = EdgeStore.open(published, dimensions=3)
    try:
        with pytest.raises(MissingCollection):
            await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)
        assert copies(published) == []
        await store.versions()
        assert [hit.doc_id for hit in await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)] == ["before"]
        other = EdgeStore.open(published, dimensions=3)  # another process's ingest publishes a new generation
        try:
            await other.upsert("docs", "acme", [stored_chunk("after", [1.0, 0.0, 0.0])])
        finally:
            await other.aclose()
        assert len(await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)) == 1  # its copy, until the poll
        await store.versions()
        assert len(await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)) == 2
    finally:
        await store.aclose()
