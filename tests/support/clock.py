"""A clock a test moves forward, for ``create_app(clock=...)``: back-offs and retry pauses run out
without the test sleeping through them."""

from __future__ import annotations


class FakeClock:
    """Monotonic seconds that change only when ``advance`` says so."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
