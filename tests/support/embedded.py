"""The real engine, started the way a user starts prefixgate: `prefixgate serve` with no upstream, so it
launches vLLM itself (the ``embedded`` session fixture runs one for every engine test). Its engine publishes
its KV-cache events (``--kv-events-config``, passed through ``engine.extra_args``), with a replay socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.engine.process import LocalEngine
from tests.support.servers import free_port
from tests.support.waiting import wait_until

ENGINE_MODEL = "prefixgate-tiny"


@dataclass
class Embedded:
    proxy: str  # prefixgate origin
    engine: str  # vLLM origin
    model: str
    data_dir: Path
    kv_events: str  # where its KV-cache events can be received (a ZeroMQ endpoint)
    kv_replay: str  # where missed batches can be asked again

    @property
    def model_folder(self) -> Path:
        """The tiny model's files (tokenizer, chat template) as the engine loaded them."""
        return next((self.data_dir / "models").glob("prefixgate-tiny-llama-*"))


@contextmanager
def running(engine: LocalEngine, timeout: float = 300) -> Iterator[LocalEngine]:
    """A second engine a test starts itself, ready; stopped afterwards however the test ends."""
    engine.start()
    try:
        engine.wait_ready(timeout)
        yield engine
    finally:
        engine.stop()


@contextmanager
def embedded_gateway(data_dir: Path, timeout: float = 420, as_served: bool = False) -> Iterator[Embedded]:
    """`prefixgate serve` with its own engine, its config, logs and data under ``data_dir``; yields once
    it is ready, sends it SIGTERM afterwards (SIGKILL to its process group if it does not stop).

    By default the engine is greedy unless a request says otherwise (the libraries under test send no temperature:
    their answers through prefixgate and straight to the engine can then be compared), writes to the output cap,
    and publishes its KV-cache events. ``as_served``: the engine exactly as `make serve` starts it, ports aside."""
    proxy_port, engine_port, events_port, replay_port = (free_port() for _ in range(4))
    kv_events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{events_port}",
                 "replay_endpoint": f"tcp://*:{replay_port}", "topic": "kv"}
    engine: dict[str, Any] = {"port": engine_port, "served_model_name": ENGINE_MODEL}
    if not as_served:
        engine |= {"answers_end": False, "extra_args": ["--kv-events-config", json.dumps(kv_events),
                                                        "--override-generation-config", json.dumps({"temperature": 0})]}
    config_path = data_dir / "embedded.yaml"
    config_path.write_text(yaml.safe_dump({"server": {"port": proxy_port}, "engine": engine,
                                           "data_dir": str(data_dir)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    log = open(data_dir / "prefixgate.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config_path)],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    proxy = f"http://127.0.0.1:{proxy_port}"
    try:
        wait_ready(proxy, process, data_dir, timeout=timeout)
        yield Embedded(proxy, f"http://127.0.0.1:{engine_port}", ENGINE_MODEL, data_dir,
                       f"tcp://127.0.0.1:{events_port}", f"tcp://127.0.0.1:{replay_port}")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def wait_ready(proxy: str, process: subprocess.Popen[bytes], data_dir: Path, timeout: float) -> None:
    """Until ``proxy`` answers /ready with 200; fails with the end of its logs if the process exits first."""

    def ready() -> bool:
        if process.poll() is not None:
            logs = (data_dir / "prefixgate.log").read_text(errors="replace")[-4000:]
            engine_log = data_dir / "engine.log"
            if engine_log.exists():
                logs += "\n--- engine.log ---\n" + engine_log.read_text(errors="replace")[-4000:]
            pytest.fail(f"prefixgate serve exited with {process.returncode}:\n{logs}")
        try:
            return httpx.get(proxy + "/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout=timeout, interval=0.5, what="prefixgate with the embedded engine to become ready")
