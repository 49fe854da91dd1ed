"""Per-line canonical form and volatile spans, remembered for lines seen before.

A system prompt of 4,000 tokens is ~16,000 characters; running a dozen detector regexes over it
costs several milliseconds, far more than the rest of the request. But from one request to the
next almost every line of it is the same: only the clock line and the trace ID change. So the
scan is done a line at a time and each line's result is kept in a bounded LRU cache; a repeated
prompt then costs one split, one cache probe per line and a join, and only its new lines are
scanned. Spans therefore never cross a line break (no built-in detector needs one).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from policies.prompt.canonical import canonical_line
from policies.prompt.volatile import Detector, Span, find_volatile

# Lines longer than this are scanned every time instead of cached, so the cache's memory stays
# bounded (cache_lines x this) whatever clients send.
MAX_CACHED_LINE = 2048
ScannedLine = tuple[str, tuple[Span, ...]]  # (the line in its output form, spans within it)


class LineScanner:
    """Scans lines for volatile spans with the built-in detectors plus ``detectors``.

    ``scan_canonical`` first puts the line in canonical form (system text); ``scan_raw`` leaves
    it as sent (conversation turns, which are never reformatted).
    """

    def __init__(self, detectors: Sequence[Detector] = (), cache_lines: int = 16384) -> None:
        self.detectors = tuple(detectors)
        self._canonical = lru_cache(maxsize=cache_lines)(self._scan_canonical)
        self._raw = lru_cache(maxsize=cache_lines)(self._scan_raw)

    def _scan_canonical(self, line: str) -> ScannedLine:
        line = canonical_line(line)
        return line, tuple(find_volatile(line, self.detectors))

    def _scan_raw(self, line: str) -> ScannedLine:
        return line, tuple(find_volatile(line, self.detectors))

    def scan_canonical(self, lines: list[str]) -> list[ScannedLine]:
        cached, direct, limit = self._canonical, self._scan_canonical, MAX_CACHED_LINE
        return [cached(line) if len(line) <= limit else direct(line) for line in lines]

    def scan_raw(self, lines: list[str]) -> list[ScannedLine]:
        cached, direct, limit = self._raw, self._scan_raw, MAX_CACHED_LINE
        return [cached(line) if len(line) <= limit else direct(line) for line in lines]

    def cache_info(self) -> dict[str, int]:
        canonical, raw = self._canonical.cache_info(), self._raw.cache_info()
        return {"hits": canonical.hits + raw.hits, "misses": canonical.misses + raw.misses,
                "lines": canonical.currsize + raw.currsize}
