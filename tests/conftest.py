"""Shared fixtures: a fake upstream for proxy mechanics, the real embedded engine for user paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.app import create_app
from proxy.config.gateway import Config
from proxy.config.load import build_config
from proxy.connections.protocol import GuardedHttpToolsProtocol
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import RedisServer
from tests.support.servers import free_port, serve_in_thread


@dataclass
class FakeServer:
    url: str  # origin, e.g. http://127.0.0.1:PORT
    app: FakeUpstream

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServer]:
    app = FakeUpstream()
    with serve_in_thread(app) as url:
        yield FakeServer(url, app)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server of its own for one test, stopped afterwards."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def make_config(data: dict[str, Any], env: dict[str, str] | None = None) -> Config:
    return build_config(data, env=env or {}, source="test config")


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start prefixgate in-process for a config dict (its data_dir a temporary one unless the dict names
    one); returns its origin URL."""
    with ExitStack() as stack:

        def start(data: dict[str, Any], env: dict[str, str] | None = None, **seams: Any) -> str:
            config = make_config({"data_dir": str(tmp_path / "data"), **data}, env)
            # the protocol `prefixgate serve` runs, with its deadlines and connection cap
            app = create_app(config, **seams)
            return stack.enter_context(serve_in_thread(app, http=GuardedHttpToolsProtocol))

        yield start


def pool(name: str, *replicas: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": list(replicas), **extra}


# ---- the real engine, started the way a user starts prefixgate: `prefixgate serve` with no upstream ----

@dataclass
class Embedded:
    proxy: str  # prefixgate origin
    engine: str  # vLLM origin
    model: str
    data_dir: Path


ENGINE_MODEL = "prefixgate-tiny"


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    data_dir = Path(os.environ.get("PREFIXGATE_TEST_DATA_DIR") or tmp_path_factory.mktemp("prefixgate-data"))
    proxy_port, engine_port = free_port(), free_port()
    config_path = data_dir / "embedded.yaml"
    config_path.write_text(yaml.safe_dump({
        "server": {"port": proxy_port},
        "engine": {"port": engine_port, "served_model_name": ENGINE_MODEL},
        "data_dir": str(data_dir),
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    log = open(data_dir / "prefixgate.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config_path)],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    proxy = f"http://127.0.0.1:{proxy_port}"
    try:
        _wait_ready(proxy, process, data_dir, timeout=420)
        yield Embedded(proxy, f"http://127.0.0.1:{engine_port}", ENGINE_MODEL, data_dir)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def _wait_ready(proxy: str, process: subprocess.Popen[bytes], data_dir: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            logs = (data_dir / "prefixgate.log").read_text(errors="replace")[-4000:]
            engine_log = data_dir / "engine.log"
            if engine_log.exists():
                logs += "\n--- engine.log ---\n" + engine_log.read_text(errors="replace")[-4000:]
            pytest.fail(f"prefixgate serve exited with {process.returncode}:\n{logs}")
        try:
            if httpx.get(proxy + "/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail("prefixgate with the embedded engine did not become ready in time")
