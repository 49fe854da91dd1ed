"""Numbered, published copies of one collection's folder: many readers, one writer, no half-written state.

An embedded engine (``qdrant_edge``) belongs to the process that opens it, and it writes whenever it
opens or closes a folder: loading rewrites ``edge_config.json`` (an atomic write, so a temporary
``.atomicwrite`` file comes and goes) and may add an empty appendable segment, and closing flushes every
segment's trackers and rewrites ``segment.json``. Nothing tells one process of another's writes. Yet a
gateway runs several workers that all search, and ``prefixgate ingest`` writes while they serve. So a
collection lives as generations, under one rule: **once published, no process writes a file inside a
generation, and no engine opens one.**

  * a writer takes the collection's lock (one writer at a time, across processes), copies the current
    generation into the next number, changes the copy with the engine, closes it, and publishes it by
    replacing ``CURRENT`` atomically (``os.replace`` after ``fsync``);
  * a reader copies the published generation into a folder of its own (``ReaderCopies``) and opens
    that; it sees a newer generation at its next look, and copies again;
  * a writer that dies (kill -9, power loss) leaves an unpublished folder and ``CURRENT`` as it was, so a
    document is either in the last published generation or was never reported stored; the next writer
    clears such leftovers under the lock.

A superseded generation is removed by the next writer, unless a reader is copying one at that moment
(``copying``, a shared lock the remover must take exclusively): it then stays for the writer after.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from proxy.retrieval.sparse_copy import copy_tree

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


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[bool]:
    """Hold ``flock(mode)`` on ``path`` for the block; yields False where a non-blocking lock was refused."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, mode)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
        with _flock(self.root / ".writer.lock", fcntl.LOCK_EX):  # waits for the writer before, however long
            yield

    @contextmanager
    def copying(self) -> Iterator[None]:
        """While a reader copies a published generation: no writer removes one (a shared lock)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with _flock(self.root / ".copying.lock", fcntl.LOCK_SH):
            yield

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
            copy_tree(current, fresh)
        else:
            fresh.mkdir()
        return fresh

    def publish(self, generation: Path) -> None:
        """Make ``generation`` the one readers copy. Its engine must be closed: nothing writes in it after this."""
        for path in generation.rglob("*"):
            if path.is_file():
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
        pointer = self.root / f".{CURRENT}.{os.getpid()}"
        with open(pointer, "w") as handle:
            handle.write(generation.name)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(pointer, self.root / CURRENT)
        _fsync_folder(self.root)

    def discard(self, generation: Path) -> None:
        """Remove a generation whole: renamed out of its numbered name first, so no one sees half of it."""
        trash = self.root / f".trash-{generation.name}-{os.getpid()}"
        try:
            os.rename(generation, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def clear_leftovers(self) -> None:
        """Remove what no reader can need: generations past the current one (writers that died), and
        superseded ones unless a reader is copying right now. Call under the writer lock."""
        current = self.current()
        number = int(current.name[1:]) if current is not None else 0
        for path in self.root.glob(".trash-*"):  # a writer that died while removing
            shutil.rmtree(path, ignore_errors=True)
        numbered = self._numbered()
        for found, path in numbered.items():
            if found > number:
                self.discard(path)
        superseded = [path for found, path in numbered.items() if found < number]
        if superseded:
            with _flock(self.root / ".copying.lock", fcntl.LOCK_EX | fcntl.LOCK_NB) as nobody_copies:
                if nobody_copies:
                    for path in superseded:
                        self.discard(path)
