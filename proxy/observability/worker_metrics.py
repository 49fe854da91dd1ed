"""Metrics that stay whole with several uvicorn workers (``--workers N``).

A scrape reaches one worker, which alone would report its own share of the traffic. With N > 1 the
CLI points prometheus_client's multi-process mode at one folder before the workers start: each
worker's counters and histograms live in memory-mapped files there, and any worker's /metrics adds
up every worker's files (those of workers that died included, so counters never go back).
One process (the default) keeps plain in-memory metrics, the cheaper kind.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

ENV_DIR = "PROMETHEUS_MULTIPROC_DIR"

log = logging.getLogger("prefixgate")


def multiprocess_dir() -> str | None:
    """The shared folder when this process is one of several workers."""
    return os.environ.get(ENV_DIR) or None


@contextmanager
def shared_metrics_dir() -> Iterator[str]:
    """The folder for a run of several workers, set in the environment they inherit: the operator's
    ``PROMETHEUS_MULTIPROC_DIR`` emptied of an earlier run's files (they would add to this run's
    counts), else a fresh temporary folder removed at exit."""
    given = multiprocess_dir()
    if given is not None:
        os.makedirs(given, exist_ok=True)
        for stale in glob.glob(os.path.join(given, "*.db")):
            os.remove(stale)
        yield given
        return
    folder = tempfile.mkdtemp(prefix="prefixgate-metrics-")
    os.environ[ENV_DIR] = folder
    try:
        yield folder
    finally:
        os.environ.pop(ENV_DIR, None)
        shutil.rmtree(folder, ignore_errors=True)


def forget_dead_workers(folder: str) -> None:
    """Drop the live-gauge files of workers that are gone (killed, then replaced by uvicorn), so
    their last in-flight counts do not linger in the sums; a worker that exits cleanly drops its own."""
    for path in glob.glob(os.path.join(folder, "gauge_live*_*.db")):
        pid = int(path.rsplit("_", 1)[1].removesuffix(".db"))
        if pid != os.getpid() and not _alive(pid):
            log.info("metrics: dropping the live gauges of worker %d, which is gone", pid)
            mark_process_dead(pid, folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def render_all_workers(folder: str) -> bytes:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=folder)
    return generate_latest(registry)
