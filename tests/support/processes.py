"""Ending the processes a test starts, however the test ends: a failed assert, a timeout, Ctrl-C.

``ended`` stops one ``subprocess.Popen`` for good (its signal, then SIGKILL if it has not exited in time)
and closes its pipes, so no process or pipe outlives the test into the next one (a Popen still running or an
unclosed pipe is a ResourceWarning there). ``Spawner`` does it for every process a test starts (the ``spawn``
fixture in tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def ended(process: subprocess.Popen[Any], timeout: float = 10, sig: int | None = signal.SIGTERM,
          group: bool = False) -> int | None:
    """Stop ``process`` if it still runs (``sig``, or none where the caller sent one already; SIGKILL after
    ``timeout`` seconds), reap it and close its pipes; returns its exit status. ``group``: it was started with
    ``start_new_session``, and whatever is left of its process group once it exited (children it started:
    uvicorn's workers) gets SIGKILL too."""
    try:
        if process.poll() is None:
            if sig is not None:
                _signal(process, sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal(process, signal.SIGKILL, group)
                process.wait(30)
        if group:
            _signal(process, signal.SIGKILL, group=True)
    finally:
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    return process.returncode


def _signal(process: subprocess.Popen[Any], sig: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
    except ProcessLookupError:  # gone already, or (a group) nothing of it is left
        pass


class Spawner:
    """Starts processes for one test and ends every one of them at its end (the ``spawn`` fixture)."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[Any]] = []

    def __call__(self, args: list[str], **popen: Any) -> subprocess.Popen[Any]:
        process = subprocess.Popen(args, **popen)
        self.processes.append(process)
        return process

    def end_all(self, timeout: float = 10) -> None:
        errors: list[BaseException] = []
        for process in reversed(self.processes):
            try:
                ended(process, timeout)
            except Exception as error:  # end the others all the same
                errors.append(error)
        self.processes.clear()
        if errors:
            raise errors[0]
