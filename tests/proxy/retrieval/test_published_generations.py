"""The rule that makes the embedded store safe across processes: once published, no process writes a
file inside a generation. Two gateway-worker processes load, search and close the collection again and
again while ingests run back to back; every file of every published generation keeps its bytes, its
inode and its times, and no file comes or goes, until a writer removes the whole generation."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.generations import CURRENT, folder_name
from tests.support.edge_writer import stored_chunk

ROOT = Path(__file__).resolve().parents[3]
SECONDS = 30.0
Listing = dict[str, tuple[int, int, int, int]]  # relative path -> inode, size, mtime_ns, ctime_ns


def listing(generation: Path) -> Listing | None:
    """Every file and folder under ``generation`` with what a write would change; None once it is gone."""
    found: Listing = {}
    try:
        for path in generation.rglob("*"):
            stat = path.lstat()
            found[str(path.relative_to(generation))] = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    except FileNotFoundError:
        return None
    return found if generation.is_dir() else None  # removed (renamed away) during the walk: not a change


def digest(generation: Path) -> dict[str, str]:
    return {str(path.relative_to(generation)): hashlib.blake2b(path.read_bytes()).hexdigest()
            for path in sorted(generation.rglob("*")) if path.is_file()}


class Watch:
    """Records each generation as ``CURRENT`` first names it, then checks it again and again."""

    def __init__(self, collection: Path) -> None:
        self.collection = collection
        self.first: dict[str, Listing] = {}
        self.digests: dict[str, dict[str, str]] = {}
        self.changes: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def look(self) -> None:
        name = (self.collection / CURRENT).read_text().strip()
        if name not in self.first:
            seen = listing(self.collection / name)
            if seen is not None:
                self.first[name], self.digests[name] = seen, digest(self.collection / name)
        for known, first in self.first.items():
            now = listing(self.collection / known)
            if now is not None and now != first:
                changed = sorted(k for k in first.keys() | now.keys() if first.get(k) != now.get(k))
                self.changes.append(f"{known}: {changed[:5]}")

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.look()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:  # a failed assert leaves no process and no pipe behind
        if process.poll() is None:
            process.kill()
        process.communicate()


def run_module(started: list[subprocess.Popen[str]], module: str, *args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started.append(process)
    return process


async def test_no_process_writes_a_published_generation_while_workers_read_and_ingests_run(
        tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    folder = tmp_path / "qdrant"
    store = EdgeStore.open(folder, dimensions=3)
    await store.upsert("docs", "acme", [stored_chunk("before", [1.0, 0.0, 0.0])])
    await store.aclose()
    watch = Watch(folder / "edge" / folder_name("docs"))
    watch.look()
    watch.thread.start()
    readers = [run_module(processes, "tests.support.edge_reader", str(folder), str(SECONDS)) for _ in range(2)]
    ingested = []
    began = time.monotonic()
    try:
        while any(reader.poll() is None for reader in readers):  # ingests back to back while the workers read
            doc_id = f"doc-{len(ingested)}"
            writer = run_module(processes, "tests.support.edge_writer", str(folder), doc_id, "0")
            _, errors = writer.communicate(timeout=120)
            assert writer.returncode == 0, errors
            ingested.append(doc_id)
    finally:
        watch.stop.set()
        watch.thread.join()
    watch.look()
    for reader in readers:
        output, errors = reader.communicate(timeout=120)
        assert reader.returncode == 0, errors
        assert int(output.split()[-1]) > 0
    assert time.monotonic() - began >= SECONDS
    assert len(ingested) >= 3 and len(watch.first) >= 3, (ingested, sorted(watch.first))
    assert watch.changes == []
    current = (watch.collection / CURRENT).read_text().strip()
    assert digest(watch.collection / current) == watch.digests[current]
    store = EdgeStore.open(folder, dimensions=3)
    try:
        await store.versions()
        hits = await store.search("docs", "acme", [1.0, 0.0, 0.0], len(ingested) + 10)
    finally:
        await store.aclose()
    assert sorted(hit.doc_id for hit in hits) == sorted(["before", *ingested])  # every ingest landed
