"""A gateway driven in memory: Starlette's TestClient runs the app's lifespan and sends requests
through ASGI, upstreams answer through ``MockUpstreams``, time moves with a ``FakeClock``. No socket and no
sleep (the app runs on the event loop of the TestClient's portal thread, the test on its own): for the
shell's decisions (routing, retries, back-off, refusals). Tests of the network itself (disconnects, slow
readers, killed upstreams) keep real sockets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config.load import build_config
from tests.support.clock import FakeClock
from tests.support.mock_transport import MockUpstreams


@contextmanager
def in_memory_gateway(data: dict[str, Any], upstreams: MockUpstreams, clock: FakeClock,
                      data_dir: Path) -> Iterator[TestClient]:
    config = build_config({"data_dir": str(data_dir), **data}, env={}, source="test config")
    with TestClient(create_app(config, transports=upstreams, clock=clock)) as client:
        yield client
