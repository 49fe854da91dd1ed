"""RSS and open files of every process of the full soak, sampled as it runs, and their growth.

A role (the gateway's master, each worker, each engine with its engine-core child, Redis) is read as
the sum over its processes; its pids are kept with each reading, so a restart (the killed engine, a
worker the master replaced) shows as a new pid rather than as a jump in one process's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil


@dataclass
class Reading:
    at: float  # seconds into the run
    rss_mb: float
    fds: int
    pids: tuple[int, ...]


@dataclass
class Samples:
    by_role: dict[str, list[Reading]] = field(default_factory=dict)

    def take(self, at: float, roles: dict[str, list[psutil.Process]]) -> None:
        for role, processes in roles.items():
            rss, fds, pids = 0, 0, []
            for process in processes:
                with contextlib.suppress(psutil.Error):
                    rss += process.memory_info().rss
                    fds += process.num_fds()
                    pids.append(process.pid)
            if pids:
                self.by_role.setdefault(role, []).append(Reading(at, round(rss / 2**20, 1), fds, tuple(pids)))

    async def every(self, seconds: float, started: float, roles: Callable[[], dict[str, list[psutil.Process]]]) -> None:
        """Sample until cancelled (psutil's reads are quick: this stays on the event loop)."""
        while True:
            self.take(round(time.monotonic() - started, 2), roles())
            await asyncio.sleep(seconds)

    def windows(self, spans: dict[str, tuple[float, float]]) -> dict[str, dict[str, object]]:
        """Per role: median RSS and open files in each named span of the run, whether its main process was
        another one at the end than at the first span's end (a restart), and its peak RSS."""
        found: dict[str, dict[str, object]] = {}
        for role, readings in self.by_role.items():
            row: dict[str, object] = {"peak_rss_mb": max(r.rss_mb for r in readings)}
            pids = []
            for name, (start, end) in spans.items():
                inside = [r for r in readings if start <= r.at <= end] or readings[-1:]
                row[f"rss_{name}_mb"] = round(statistics.median(r.rss_mb for r in inside), 1)
                row[f"fds_{name}"] = statistics.median(r.fds for r in inside)
                pids.append(inside[-1].pids[0])
            row["restarted"] = len(set(pids)) > 1
            found[role] = row
        return found
