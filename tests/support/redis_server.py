"""A real redis-server (Debian's package) on a free loopback port, for the tests of shared caches."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from proxy.engine.process import free_port
from tests.support.processes import ended

# redis.timeout_ms for tests where Redis is meant to answer. The default (100 ms) suits a Redis that gets CPU
# when it needs it; beside CPU hogs on a 2-core machine a loopback round trip now and then takes longer, and
# the breaker then rightly keeps the cache (or the limits) local for retry_s, which is not what those tests
# are about. Tests of an outage stop or freeze the server and set the timeout they mean.
PATIENT_MS = 5000


class RedisServer:
    """Start, stop, freeze and thaw one redis-server without persistence."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: `apt-get install redis-server` (make test does it)")
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not self._answers_ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()  # a redis-server that did not answer in time is not left running
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.thaw()
            ended(self.process, timeout=10)
        self.process = None

    def freeze(self) -> None:
        """SIGSTOP: connections stay open and nothing answers, the worst kind of outage."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)
