"""The clock the shell reads for back-offs, rate windows, retry pauses and the freshness of readings.

It is ``time.monotonic`` unless ``create_app`` is given another: tests pass a clock they move
forward, so a back-off runs out without the test sleeping through it. Policies never read a clock;
the shell passes them ``now``. Latency measurements (``perf_counter``) and asyncio timeouts stay on
the real clocks.
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic

Clock = Callable[[], float]  # seconds, monotonic

SYSTEM_CLOCK: Clock = monotonic
