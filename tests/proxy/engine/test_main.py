"""The engine ends with the gateway that started it, checked without vLLM: LocalEngine.start launches a
small child that runs the engine's first step (end_with_parent) and then sleeps where vLLM would serve.
That vLLM's own children go too is checked against the real engine (tests/integration/test_engine_main.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import psutil

from proxy.engine.main import ENV_PARENT
from tests.support.waiting import wait_until

ARM = "from proxy.engine.main import end_with_parent; end_with_parent(); print('armed', flush=True)"
SMALL_ENGINE = ARM + "; import time; time.sleep(300)"  # where vLLM would serve
GATEWAY = f"""
import sys, time
from proxy.engine.process import LocalEngine

class SmallEngine(LocalEngine):
    def command(self) -> list[str]:
        return [sys.executable, "-c", {SMALL_ENGINE!r}]

engine = SmallEngine(".", served_model_name="small", port=0, log_path=sys.argv[1])
engine.start()
print(engine.pid, flush=True)
time.sleep(300)
"""


def _armed(engine: psutil.Process, log: Path) -> bool:
    assert engine.is_running(), "the small engine exited before it armed"
    return "armed" in (log.read_text() if log.exists() else "")


def test_an_engine_ends_when_its_gateway_is_killed_with_sigkill(tmp_path: Path) -> None:
    engine_log = tmp_path / "engine.log"
    engine: psutil.Process | None = None
    with subprocess.Popen([sys.executable, "-c", GATEWAY, str(engine_log)], stdout=subprocess.PIPE,
                          text=True) as gateway:
        try:
            assert gateway.stdout is not None
            engine = psutil.Process(int(gateway.stdout.readline()))
            wait_until(partial(_armed, engine, engine_log), timeout=60,
                       what="the small engine to arm (its log to say 'armed')")
            gateway.kill()  # SIGKILL: nothing in the gateway runs
            gateway.wait(10)
            _, alive = psutil.wait_procs([engine], timeout=30)
            assert not alive, "the engine outlived its gateway"
        finally:
            gateway.kill()
            if engine is not None and engine.is_running():
                engine.kill()


def test_an_engine_whose_gateway_died_before_it_armed_stops_at_once() -> None:
    """The gateway may die between starting the engine and the engine's prctl: then it must stop by itself."""
    not_the_parent = "1"  # init's pid: never this test's
    done = subprocess.run([sys.executable, "-c", ARM], env={**os.environ, ENV_PARENT: not_the_parent},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM and "armed" not in done.stdout, (done.returncode, done.stdout)
