"""Numbered, published copies of one collection's folder: many readers, one writer, no half-written state.

An embedded engine (``qdrant_edge``) belongs to the process that opens it: its write-ahead log takes a
lock, and nothing tells one process of another's writes. Yet a gateway runs several workers that all
search, and ``prefixgate ingest`` writes while they serve. So a collection lives as generations:

  * readers open the generation that ``CURRENT`` names, and never write to it;
  * a writer takes the collection's lock (one writer at a time, across processes), copies the current
    generation into the next number, changes the copy, and publishes it by replacing ``CURRENT``
    atomically (``os.replace`` after ``fsync``); readers see the new one at their next look;
  * a writer that dies (kill -9, power loss) leaves an unpublished folder and ``CURRENT`` as it was, so a
    document is either in the last published generation or was never reported stored; the next writer
    clears such leftovers under the lock.

The two generations before the current one stay on disk until ``GRACE_S`` after the current one was
published, so a reader that has not looked yet keeps reading whole files; the next writer removes the rest.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GRACE_S = 60.0
CURRENT = "CURRENT"
_NUMBERED = re.compile(r"^g(\d{9})$")


def folder_name(collection: str) -> str:
    """A folder name for any collection name: readable where it can be, unique always."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", collection)[:40].lstrip(".") or "_"
    return f"{readable}-{hashlib.blake2b(collection.encode(), digest_size=6).hexdigest()}"


def _fsync_folder(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class Generations:
    """The generations of one collection under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def current(self) -> Path | None:
        """The published generation, or None before the first publish."""
        try:
            name = (self.root / CURRENT).read_text().strip()
        except FileNotFoundError:
            return None
        return self.root / name

    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        """One writer at a time for this collection, across processes; released when its process dies."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".writer.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # waits for the writer before, however long its ingest runs
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _numbered(self) -> dict[int, Path]:
        found = {}
        for path in self.root.iterdir():
            match = _NUMBERED.match(path.name)
            if match and path.is_dir():
                found[int(match.group(1))] = path
        return found

    def begin(self) -> Path:
        """A new, unpublished generation: a copy of the current one, or an empty folder. Call under the lock."""
        self.clear_leftovers()
        current = self.current()
        number = int(current.name[1:]) + 1 if current is not None else 1
        fresh = self.root / f"g{number:09d}"
        if current is not None:
            shutil.copytree(current, fresh)
        else:
            fresh.mkdir()
        return fresh

    def publish(self, generation: Path) -> None:
        """Make ``generation`` the one readers open. Its files must be closed and flushed."""
        for path in generation.rglob("*"):
            if path.is_file():
                with open(path, "rb+") as handle:
                    os.fsync(handle.fileno())
        pointer = self.root / f".{CURRENT}.{os.getpid()}"
        with open(pointer, "w") as handle:
            handle.write(generation.name)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(pointer, self.root / CURRENT)
        _fsync_folder(self.root)

    def discard(self, generation: Path) -> None:
        shutil.rmtree(generation, ignore_errors=True)

    def clear_leftovers(self, now: float | None = None) -> None:
        """Remove what no reader can need: generations past the current one (writers that died) and
        generations superseded more than ``GRACE_S`` ago. Call under the lock."""
        current = self.current()
        number = int(current.name[1:]) if current is not None else 0
        published_at = (self.root / CURRENT).stat().st_mtime if current is not None else 0.0
        now = time.time() if now is None else now
        for found, path in self._numbered().items():
            unpublished = found > number
            # a reader may still be on one of the two before the current if it was published moments ago
            stale = found < number and (now - published_at > GRACE_S or found < number - 2)
            if unpublished or stale:
                shutil.rmtree(path, ignore_errors=True)
