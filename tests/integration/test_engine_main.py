"""The embedded engine ends with its gateway however the gateway ends: SIGKILL runs no clean-up in
the gateway, and an orphaned engine would keep its port and gigabytes of memory. vLLM's own children
(EngineCore, multiprocessing's resource tracker) must go too; tests/proxy/engine/test_main.py checks the
mechanism cheaply, without vLLM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from proxy.engine.tiny_model import ensure_tiny_model
from tests.support.embedded import Embedded
from tests.support.servers import free_port
from tests.support.waiting import answers, wait_until

pytestmark = pytest.mark.engine


def test_a_gateway_killed_with_sigkill_takes_its_engine_with_it(embedded: Embedded, tmp_path: Path) -> None:
    gateway_port, engine_port = free_port(), free_port()
    model = ensure_tiny_model(embedded.data_dir)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / model.name).symlink_to(model)  # a data dir whose demo model was built on an earlier start
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"port": gateway_port}, "data_dir": str(tmp_path), "engine": {"port": engine_port},
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    with open(tmp_path / "gateway.log", "wb") as log:
        gateway = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(config)],
                                   stdout=log, stderr=subprocess.STDOUT, env=env)
    engine_processes: list[psutil.Process] = []
    try:
        log = tmp_path / "gateway.log"

        def ready() -> bool:
            assert gateway.poll() is None, log.read_text()  # exited: its log says why
            return answers(f"http://127.0.0.1:{gateway_port}/ready")

        wait_until(ready, timeout=300, interval=0.5, what="prefixgate with the embedded engine to become ready",
                   state=log.read_text)
        assert "tiny demo model" not in (tmp_path / "gateway.log").read_text()  # it was there already: not built
        engine_processes = psutil.Process(gateway.pid).children(recursive=True)
        assert engine_processes and answers(f"http://127.0.0.1:{engine_port}/health")
        gateway.kill()  # SIGKILL: nothing in the gateway runs
        gateway.wait(10)
        _, alive = psutil.wait_procs(engine_processes, timeout=60)
        assert not alive, [(p.pid, p.name()) for p in alive]
        assert not answers(f"http://127.0.0.1:{engine_port}/health")  # its port is free again
    finally:
        if gateway.poll() is None:
            gateway.kill()
        for process in engine_processes:  # never leave an engine behind, even when the test fails
            if process.is_running():
                process.send_signal(signal.SIGKILL)

