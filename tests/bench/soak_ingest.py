"""Ingest while the gateway serves, as operators do: `prefixgate ingest` of a few fresh documents every
30 s, and now and then a big ingest killed with SIGKILL while it writes; at the end, what the store holds.

Every document carries a word no other document has, so the end check can ask the store (as the
gateway opens it) for each one by BM25 alone: a document is landed when its ingest said so and a search
for its word finds it; lost when its ingest said so and the search does not; and a killed ingest must
leave none of its documents visible, neither its records nor its chunks. "Killed mid-way" is checked,
not assumed: the ingest's own progress bar must show it had written some documents and not all, its
process must still be alive at the kill, and the collection's published generation must be the same
after the kill as before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tests.bench.soak_stack import COLLECTION, ingest_command

WORDS = ("blender", "motor", "jar", "lid", "blade", "seal", "warranty", "refund", "courier", "order", "invoice",
         "parcel", "spindle", "gasket", "voltage", "pulse", "speed", "crush", "smoothie", "soup")
PROGRESS = re.compile(rb"(\d+)/(\d+) \[")
KILL_AFTER_FIRST_S = 1.0  # how long after its first document is written a big ingest is killed
INGEST_TIMEOUT_S = 300.0


def unique_word(batch: int, number: int) -> str:
    """A word no other document has, letters only (BM25's tokenizer keeps it whole)."""
    def letters(value: int) -> str:
        out = ""
        for _ in range(4):
            value, digit = divmod(value, 26)
            out += chr(97 + digit)
        return out

    return f"zq{letters(batch)}x{letters(number)}"


def write_batch(folder: Path, batch: int, count: int, paragraphs: int) -> dict[str, str]:
    """``count`` documents with names no earlier batch used; returns each one's path -> its unique word."""
    folder.mkdir(parents=True)
    words: dict[str, str] = {}
    for number in range(count):
        word = unique_word(batch, number)
        body = [f"# Note {batch}-{number}", f"The code {word} belongs to batch {batch}, note {number}."]
        for p in range(paragraphs):  # every paragraph its own, so none counts as boilerplate
            draw = random.Random(f"{batch}-{number}-{p}")
            body.append(" ".join(draw.choice(WORDS) for _ in range(120)))
        path = folder / f"batch{batch:04d}-note{number:03d}.md"
        path.write_text("\n\n".join(body) + "\n")
        words[str(path)] = word
    return words


def _output_file(path: Path) -> BinaryIO:
    return open(path, "wb")  # a local file, opened once: no wait worth a thread


def published(workdir: Path) -> dict[str, str]:
    """Each collection folder's published generation, as the CURRENT file names it."""
    return {path.parent.name: path.read_text().strip() for path in (workdir / "qdrant").rglob("CURRENT")}


@dataclass
class Ingest:
    batch: int
    kind: str  # "fresh" (must land) or "killed" (must leave nothing)
    words: dict[str, str]  # document ID as ingest names it -> its unique word
    started: float
    ended: float = 0.0
    returncode: int | None = None
    output: str = ""  # the end of what it printed
    midway: dict[str, Any] = field(default_factory=dict)  # the killed one: what the kill found


class Ingests:
    """The ingests of one run, started from the run's folder (document IDs are paths relative to it)."""

    def __init__(self, workdir: Path, config_path: Path, started: float) -> None:
        self.workdir = workdir
        self.config_path = config_path
        self.started = started
        self.done: list[Ingest] = []
        self.running: set[asyncio.subprocess.Process] = set()

    def _batch(self, count: int, paragraphs: int) -> tuple[int, Path, dict[str, str]]:
        batch = len(self.done)  # the first ingest, before the start, is batch 0
        folder = self.workdir / "batches" / f"b{batch:04d}"
        words = write_batch(folder, batch, count, paragraphs)
        return batch, folder, {str(Path(path).relative_to(self.workdir)): word for path, word in words.items()}

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 2)

    async def fresh(self, count: int = 4) -> Ingest:
        """A few short documents; the ingest runs to its end."""
        batch, folder, words = self._batch(count, paragraphs=2)
        ingest = Ingest(batch, "fresh", words, self._now())
        self.done.append(ingest)
        process = await asyncio.create_subprocess_exec(*ingest_command(self.config_path, folder), cwd=self.workdir,
                                                       stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.STDOUT)
        self.running.add(process)
        output = b""
        try:  # an ingest may wait its turn behind another's lock, but not forever
            output, _ = await asyncio.wait_for(process.communicate(), INGEST_TIMEOUT_S)
        except TimeoutError:
            output = f"timed out after {INGEST_TIMEOUT_S:g} s".encode()
        finally:
            await self._end(process)
        ingest.ended, ingest.returncode = self._now(), process.returncode
        ingest.output = output.decode(errors="replace")[-600:]
        return ingest

    async def killed(self, count: int = 40) -> Ingest:
        """Many long documents; SIGKILL ``KILL_AFTER_FIRST_S`` after its progress shows the first written."""
        batch, folder, words = self._batch(count, paragraphs=12)
        ingest = Ingest(batch, "killed", words, self._now())
        self.done.append(ingest)
        progress = self.workdir / f"ingest-b{batch:04d}.progress"
        out = _output_file(progress)
        try:  # the child keeps its own descriptor
            process = await asyncio.create_subprocess_exec(*ingest_command(self.config_path, folder, quiet=False),
                                                           cwd=self.workdir, stdout=out, stderr=out)
        finally:
            out.close()
        self.running.add(process)
        try:
            first = await self._first_written(process, progress)
            await asyncio.sleep(KILL_AFTER_FIRST_S)
            before = published(self.workdir)
            alive = process.returncode is None
            written = self._written(progress)
            if alive:
                process.send_signal(signal.SIGKILL)
            await process.wait()
            ingest.midway = {"first_written_at": first, "alive_at_kill": alive, "written_at_kill": written,
                             "documents": count, "published_unchanged": published(self.workdir) == before,
                             "killed_at": self._now()}
        finally:
            await self._end(process)
        ingest.ended, ingest.returncode = self._now(), process.returncode
        ingest.output = progress.read_bytes().decode(errors="replace").replace("\r", "\n")[-600:]
        return ingest

    async def _first_written(self, process: asyncio.subprocess.Process, progress: Path,
                             timeout: float = 120) -> float | None:
        deadline = time.monotonic() + timeout
        while process.returncode is None and time.monotonic() < deadline:
            if self._written(progress)[0] >= 1:
                return self._now()
            await asyncio.sleep(0.05)
        return None

    @staticmethod
    def _written(progress: Path) -> tuple[int, int]:
        """(documents written, documents in the run) as the ingest's progress bar last said."""
        found = PROGRESS.findall(progress.read_bytes())
        return (int(found[-1][0]), int(found[-1][1])) if found else (0, 0)

    async def _end(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        self.running.discard(process)

    def stop_all(self) -> None:
        """SIGKILL to any ingest still running (the run ended early); called from the soak's finally."""
        for process in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                process.kill()


def midway_ok(ingest: Ingest) -> bool:
    """The kill landed while the ingest was writing: alive, some documents written and not all, nothing
    published by it."""
    seen = ingest.midway
    written, total = seen.get("written_at_kill", (0, 0))
    return bool(seen.get("alive_at_kill")) and 0 < written < total and bool(seen.get("published_unchanged"))


async def check_store(config_path: Path, ingests: list[Ingest]) -> dict[str, Any]:
    """Each ingest's documents looked up in the store the gateway reads, by their unique words."""
    from proxy.config.load import load_config
    from proxy.retrieval.retriever import configured_store
    from proxy.retrieval.vector_store import SearchMode

    config = load_config(str(config_path))
    dimensions = config.retrieval.embeddings_dimensions
    store = configured_store(config)(dimensions)
    words_only = SearchMode(0.0, 1.0)
    try:
        records = await store.records.load(COLLECTION, "rag")
        verdicts: dict[str, Any] = {"landed": 0, "lost": 0, "failed": 0, "killed_clean": 0, "killed_visible": 0,
                                    "killed_not_midway": 0, "records": len(records), "problems": []}
        for ingest in ingests:
            visible = []
            for doc_id, word in ingest.words.items():
                hits = await store.search(COLLECTION, "rag", [0.0] * dimensions, 5, text=word, mode=words_only)
                if doc_id in records or any(hit.doc_id == doc_id for hit in hits):
                    visible.append(doc_id)
            verdicts["problems"] += verdict(ingest, visible, verdicts)
        return verdicts
    finally:
        await store.aclose()


def verdict(ingest: Ingest, visible: list[str], counts: dict[str, Any]) -> list[str]:
    """Count one ingest into ``counts``; returns what went wrong with it, in words."""
    name = f"{ingest.kind} ingest {ingest.batch} (at {ingest.started:.0f} s)"
    if ingest.kind == "killed":
        if not midway_ok(ingest):
            counts["killed_not_midway"] += 1
            return [f"{name}: not killed mid-way: {ingest.midway}"]
        if visible:
            counts["killed_visible"] += 1
            return [f"{name}: {len(visible)} of {len(ingest.words)} documents visible after the kill"]
        counts["killed_clean"] += 1
        return []
    if ingest.returncode != 0:
        counts["failed"] += 1
        return [f"{name}: exit {ingest.returncode}: {ingest.output.strip()[-300:]}"]
    if len(visible) < len(ingest.words):
        counts["lost"] += 1
        return [f"{name}: reported success, {len(ingest.words) - len(visible)} of {len(ingest.words)} missing"]
    counts["landed"] += 1
    return []
