"""A local vLLM engine process: the embedded default, and the engine the test suite runs against."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from proxy.engine.main import ENV_PARENT

ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; overridden by EngineConfig.kv_cache_gib
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # no worker processes (EngineCore still is one): starts faster
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_TARGET_DEVICE": "cpu",
    "TOKENIZERS_PARALLELISM": "false",
}


def free_port() -> int:
    """A loopback port nobody listens on right now (for the engine, tests and benchmarks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EngineError(RuntimeError):
    """The engine could not be started; the message carries the end of its log."""


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


class LocalEngine:
    def __init__(
        self,
        model_dir: str | Path,
        *,
        served_model_name: str,
        port: int,
        log_path: str | Path,
        max_model_len: int = 65_536,
        kv_cache_gib: int = 1,
        extra_args: list[str] | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.model_dir = str(model_dir)
        self.served_model_name = served_model_name
        self.port = port
        self.log_path = Path(log_path)
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.extra_args = list(extra_args or [])
        self.extra_env = dict(extra_env or {})
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.origin + "/v1"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "proxy.engine.main", "serve", self.model_dir,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--served-model-name", self.served_model_name,
            "--max-model-len", str(self.max_model_len),
            "--enable-prefix-caching", "--enforce-eager",
            "--enable-prompt-tokens-details",  # usage counts cached prompt tokens (for clients to see their hits)
            *self.extra_args,
        ]

    def start(self) -> None:
        env = {**os.environ, **ENGINE_ENV, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib), **self.extra_env,
               ENV_PARENT: str(os.getpid())}  # the engine ends when this process does (engine_main)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise EngineError(f"vLLM engine exited with code {self._process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.origin + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"vLLM engine not healthy after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 15.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass
