"""The access log: one JSON line per request, written off the event loop.

A request's line is serialized (orjson, a few microseconds) and queued; a daemon thread writes
what has queued a few times a second, so a log reader that stalls (a full pipe, a slow disk) never
blocks the event loop, and an idle gateway wakes no thread per request. Past ``MAX_PENDING``
waiting lines new ones are dropped and counted in the next line written, never held without bound.
Prompt content is left out unless the config asks for it (``access_log.prompts``, for debugging).
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from typing import IO, Any

import orjson

MAX_PENDING = 100_000
FLUSH_EVERY = 0.2  # seconds


class AccessLog:
    def __init__(self, path: str | None = None, *, prompts: bool = False) -> None:
        self.prompts = prompts
        self._path = path
        self._pending: deque[bytes] = deque()
        self._dropped = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._write_forever, name="prefixgate-access-log", daemon=True)
        self._out: IO[bytes] | None = None

    def start(self) -> None:
        self._out = open(self._path, "ab") if self._path else sys.stdout.buffer  # closed in close()
        self._thread.start()

    def write(self, entry: dict[str, Any]) -> None:
        """Queue one line; the event loop never waits on the file."""
        if len(self._pending) >= MAX_PENDING:
            self._dropped += 1
            return
        if self._dropped:
            entry["dropped_before"], self._dropped = self._dropped, 0
        self._pending.append(orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE))

    def _flush(self) -> None:
        out = self._out
        if out is None or not self._pending:
            return
        lines = []
        pending = self._pending
        while pending:
            lines.append(pending.popleft())  # deque pops are atomic: the loop may append meanwhile
        out.write(b"".join(lines))
        out.flush()

    def _write_forever(self) -> None:
        while not self._closed.wait(FLUSH_EVERY):
            try:
                self._flush()
            except (OSError, ValueError):  # the stream went away: keep the gateway serving
                self._pending.clear()
        self._flush()

    def close(self) -> None:
        """Write what is queued and stop the writer."""
        if self._thread.is_alive():
            self._closed.set()
            self._thread.join(5)
        if self._out is not None and self._path:
            self._out.close()

