"""prefixgate gateways for tests: in this process on a thread of its own (``serve_gateway``, what the
``start_proxy`` fixture runs), or as separate processes (`prefixgate serve`, ``gateway_processes``) for
tests of what several gateway replicas do together: pick the same engine, share one rate limit."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from proxy.app import create_app
from proxy.config.gateway import Config
from proxy.connections.protocol import GuardedHttpToolsProtocol
from proxy.engine.process import free_port
from tests.support.processes import ended
from tests.support.servers import serve_in_thread
from tests.support.waiting import answers, wait_until


@contextmanager
def serve_gateway(config: Config, **seams: Any) -> Iterator[str]:
    """prefixgate for ``config`` under uvicorn on a thread, with the protocol `prefixgate serve` runs (its
    deadlines and connection cap); yields its origin URL. ``seams`` go to create_app."""
    with serve_in_thread(create_app(config, **seams), http=GuardedHttpToolsProtocol) as origin:
        yield origin


@contextmanager
def gateway_processes(config: dict[str, Any], workdir: Path, count: int, timeout: float = 60) -> Iterator[list[str]]:
    """Start ``count`` gateways on ``config`` (each its own port and hash seed, so nothing they agree
    on can come from Python's per-process hashing); yields their origins once all are ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    started: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for index in range(count):
            port = free_port()
            path = workdir / f"gateway-{port}.yaml"
            server = {**config.get("server", {}), "port": port}
            path.write_text(yaml.safe_dump({**config, "server": server, "data_dir": str(workdir)}))
            # a session of its own: should it not stop on SIGTERM, SIGKILL to its group ends its workers too
            process = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(path)],
                                       env={**env, "PYTHONHASHSEED": str(11 * (index + 1))},
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            started.append((process, f"http://127.0.0.1:{port}"))
        for process, origin in started:
            wait_until(partial(answers, origin + "/ready", process), timeout=timeout, interval=0.2,
                       what=f"prefixgate serve at {origin} to become ready")
        yield [origin for _, origin in started]
    finally:
        for process, _ in started:  # all told at once, so they drain together
            if process.poll() is None:
                process.terminate()
        for process, _ in started:
            ended(process, timeout=30, sig=None, group=True)

