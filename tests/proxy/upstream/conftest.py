"""Fixtures of the replica-choice tests (test_pools.py, test_replica_load.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.support.fake_server import FakeServer, serve_fake


@pytest.fixture
def replicas() -> Iterator[list[FakeServer]]:
    """Two fake upstreams of their own, the replicas of the test's pool."""
    with ExitStack() as stack:
        yield [stack.enter_context(serve_fake()) for _ in range(2)]
