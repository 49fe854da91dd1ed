"""The fake OpenAI upstream (tests/support/fake_upstream.py) served on a thread of this process, with
the handle tests reach it by: its URL, and the app itself to read its stats or change its behaviour."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import serve_in_thread


@dataclass
class FakeServer:
    url: str  # origin, e.g. http://127.0.0.1:PORT
    app: FakeUpstream

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


@contextmanager
def serve_fake(app: FakeUpstream | None = None) -> Iterator[FakeServer]:
    """``app`` (a new FakeUpstream unless given) served until the block ends."""
    app = app or FakeUpstream()
    with serve_in_thread(app) as url:
        yield FakeServer(url, app)
