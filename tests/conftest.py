"""Fixtures shared by every test folder: a fake upstream for proxy mechanics, prefixgate in this process,
a redis-server, the real embedded engine for user paths, and processes a test starts, ended with it. The
helpers behind them live in tests/support."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.configs import make_config
from tests.support.embedded import Embedded, embedded_gateway
from tests.support.fake_server import FakeServer, serve_fake
from tests.support.gateways import serve_gateway
from tests.support.processes import Spawner
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServer]:
    with serve_fake() as server:
        yield server


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server of its own for one test, stopped afterwards."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    """Starts processes (``spawn([...], **popen)`` is ``subprocess.Popen``) and ends every one still running
    once the test ends, however it ends, closing their pipes."""
    spawner = Spawner()
    try:
        yield spawner
    finally:
        spawner.end_all()


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start prefixgate in-process for a config dict (its data_dir a temporary one unless the dict names
    one); returns its origin URL."""
    with ExitStack() as stack:

        def start(data: dict[str, Any], env: dict[str, str] | None = None, **seams: Any) -> str:
            config = make_config({"data_dir": str(tmp_path / "data"), **data}, env)
            return stack.enter_context(serve_gateway(config, **seams))

        yield start


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    """`prefixgate serve` with no upstream, running the real engine it starts; its data dir is
    PREFIXGATE_TEST_DATA_DIR when set, else a temporary one."""
    data_dir = Path(os.environ.get("PREFIXGATE_TEST_DATA_DIR") or tmp_path_factory.mktemp("prefixgate-data"))
    with embedded_gateway(data_dir) as started:
        yield started
