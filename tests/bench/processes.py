"""Processes the engine benchmarks start: vLLM CPU engines on chosen cores, prefixgate from a config."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from proxy.engine.process import LocalEngine, free_port
from proxy.engine.tiny_model import ensure_tiny_model

ROOT = Path(__file__).resolve().parents[2]


def start_engine(model: str, workdir: Path, *, core: int | None, name: str = "engine",
                 extra_args: list[str] | None = None) -> LocalEngine:
    """The tiny model on a vLLM CPU engine with the dev endpoints (POST /reset_prefix_cache), its
    compute thread bound to ``core`` (None: the engine's own choice). Not waited for: start several,
    then ``wait_ready`` each, so their ~20 s starts overlap."""
    model_dir = ensure_tiny_model(Path(os.environ.get("PREFIXGATE_DATA_DIR", workdir)))
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if core is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    engine = LocalEngine(model_dir, served_model_name=model, port=free_port(), log_path=workdir / f"{name}.log",
                         extra_env=env, extra_args=extra_args)
    engine.start()
    if core is not None and engine.pid is not None:
        os.sched_setaffinity(engine.pid, {core})  # threads it starts later inherit this
    return engine


BENCH_SALT_SECRET = "prefixgate-bench-salt-secret"  # every bench gateway's, so direct runs can send the same salts


def start_gateway(config: dict[str, Any], workdir: Path,
                  name: str = "prefixgate") -> tuple[subprocess.Popen[bytes], str]:
    """``prefixgate serve`` with ``config`` (server.port and data_dir filled in); returns it and its origin."""
    port = free_port()
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"data_dir": str(workdir), **config, "server": {"port": port}}))
    with open(workdir / f"{name}.log", "wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(path)],
                                   env={**os.environ, "PREFIXGATE_CACHE_SALT_SECRET": BENCH_SALT_SECRET},
                                   cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)  # inherits this process's cores
    origin = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(origin + "/ready", timeout=2).status_code == 200:
                return process, origin
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"prefixgate did not become ready:\n{(workdir / f'{name}.log').read_text()[-3000:]}")


def stop_gateway(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
