"""A process's own copy of a published generation, so the engine it opens writes nowhere shared.

``Generations`` publishes folders that no engine may open (opening and closing write). A process that
searches therefore copies the published generation into ``readers/`` under the collection's folder
and opens the copy; the copy is its alone, and goes when the process moves to a newer generation or
closes the store. Each copy has a lock file beside it that its process holds exclusively for the
copy's life: a process killed with kill -9 drops its lock, and the next ``claim_copy`` (any
process's) removes that copy. The cost is a copy per process and collection on disk (without the
files' holes: ``copy_tree``) and in the page cache, and one copy's time each time a generation is
published.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from proxy.retrieval.edge_shards import Generation, load_generation
from proxy.retrieval.generations import Generations
from proxy.retrieval.sparse_copy import copy_tree

READERS = "readers"
_TRIES = 5  # a generation can be superseded and removed between reading CURRENT and copying it


@dataclass
class ReaderCopy:
    """One process's copy of the published generation ``source`` at ``path``; ``lock`` is held meanwhile."""

    source: Path
    path: Path
    lock: Path
    descriptor: int

    def remove(self) -> None:
        """Delete the copy (its engine closed first), then give up its lock."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.lock.unlink(missing_ok=True)
        os.close(self.descriptor)


def _held_lock(lock: Path) -> int:
    """``lock`` created already locked: made under a temporary name, locked, then renamed into place,
    so no other process's sweep sees it unlocked and removes the copy being made."""
    temporary = lock.with_name(f".{lock.name}.tmp")
    descriptor = os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    os.rename(temporary, lock)
    return descriptor


def sweep(readers: Path, now: float) -> None:
    """Remove the copies of processes that are gone: their lock files are no longer held. A temporary
    lock file is unlocked for a moment between its creation and its ``flock``, so one counts as left
    behind (its process died before renaming it) only once it is a minute old."""
    stale_temporaries = [path for path in readers.glob(".*.lock.tmp") if _age(path, now) > 60]
    for lock in [*readers.glob("*.lock"), *stale_temporaries]:
        try:
            descriptor = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)  # its process is alive
            continue
        try:
            if not lock.name.startswith("."):
                shutil.rmtree(lock.with_suffix(""), ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(descriptor)


def _age(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def claim_copy(generations: Generations) -> ReaderCopy | None:
    """A fresh copy of the published generation for this process; None before the first publish."""
    readers = generations.root / READERS
    readers.mkdir(parents=True, exist_ok=True)
    sweep(readers, time.time())
    for _ in range(_TRIES):
        source = generations.current()
        if source is None:
            return None
        with generations.copying():
            if not source.is_dir():  # superseded and removed since CURRENT was read: look again
                continue
            name = f"{source.name}-{os.getpid()}-{secrets.token_hex(4)}"
            lock = readers / f"{name}.lock"
            descriptor = _held_lock(lock)
            copy = ReaderCopy(source, readers / name, lock, descriptor)
            try:
                copy_tree(source, copy.path)
            except BaseException:
                copy.remove()
                raise
            return copy
    raise RuntimeError(f"no published generation of {generations.root} held still long enough to copy")


@dataclass
class OpenCopy:
    """The engine open on this process's copy: what a reader searches."""

    generation: Generation
    copy: ReaderCopy

    def close(self) -> None:
        try:
            self.generation.close()
        finally:
            self.copy.remove()


def open_copy(generations: Generations) -> OpenCopy | None:
    """Copy the published generation and open the copy; None before the first publish."""
    copy = claim_copy(generations)
    if copy is None:
        return None
    try:
        return OpenCopy(load_generation(copy.path), copy)
    except BaseException:
        copy.remove()
        raise
