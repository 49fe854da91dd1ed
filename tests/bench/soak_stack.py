"""The processes of the full soak, started the way users run prefixgate and stopped whatever happens.

Redis (limits, answer and passage caches), two vLLM CPU engines of the tiny model in one pool routed by
their KV-cache events (each pinned to its own core, as on this 2-core machine), the retrieval
collection ingested with `prefixgate ingest` before the gateway starts, and `prefixgate serve` with two
workers and the embedded store under the run's folder. ``running_stack`` is the only way in: its exit
stops every process it started, on an exception and on Ctrl-C too, and ``Stack.kill_engine`` replaces
an engine in place so the exit stops the one that runs then, not the one that was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from proxy.engine.process import LocalEngine, free_port
from tests.bench.processes import BENCH_SALT_SECRET, start_engine
from tests.support.redis_server import RedisServer

MODEL = "prefixgate-tiny"
COLLECTION = "docs"
KEYS = {"app": "sk-soakfull-app-1", "rag": "sk-soakfull-rag-1", "cached": "sk-soakfull-cached-1",
        "limited": "sk-soakfull-limited-1"}
LIMITED_PER_MINUTE = 30
WORKERS = 2
ENGINE_START_S = 300


def kv_events_args() -> list[str]:
    """An engine's flags to publish its KV-cache events on its own sockets (a restart reuses them)."""
    events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{free_port()}",
              "replay_endpoint": f"tcp://*:{free_port()}", "topic": "kv"}
    return ["--kv-events-config", json.dumps(events)]


def gateway_config(engines: list[LocalEngine], redis_url: str, workdir: Path, port: int) -> dict[str, Any]:
    """What a user of this stack writes: two workers, Redis, one kv_events pool, four tenants."""
    return {
        "data_dir": str(workdir),
        "server": {"port": port, "workers": WORKERS},
        "redis": {"url": redis_url},
        "pools": [{"name": "engines", "replicas": [engine.base_url for engine in engines], "models": [MODEL],
                   "balance": "kv_events", "kv_events": {"tokenizer": engines[0].model_dir}}],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()],
                 "cache_salt_secret": BENCH_SALT_SECRET},
        # the tiny model's tokenizer makes ~2 characters a token, not the ~4 the budget counts: 600 keeps the
        # passages, the system prompt and the answer inside the engine's 4,096
        "tenants": {"rag": {"retrieval": {"collection": COLLECTION, "budget_tokens": 600}},
                    "cached": {"answer_cache": {"ttl_s": 30}},
                    "limited": {"limits": {"requests_per_minute": LIMITED_PER_MINUTE}}},
    }


@dataclass
class Stack:
    workdir: Path
    config_path: Path
    redis: RedisServer
    engines: list[LocalEngine]
    gateway: subprocess.Popen[bytes]
    origin: str
    cores: list[int]

    def processes(self) -> dict[str, list[psutil.Process]]:
        """Each role's processes now: the gateway's master and workers apart, each engine with its children."""
        roles: dict[str, list[psutil.Process]] = {}
        with contextlib.suppress(psutil.Error):
            master = psutil.Process(self.gateway.pid)
            roles["gateway master"] = [master]
            children = sorted(master.children(), key=lambda p: p.pid)
            workers = [child for child in children if "spawn_main" in " ".join(child.cmdline())]
            for number, worker in enumerate(workers, 1):
                roles[f"gateway worker {number}"] = [worker, *worker.children(recursive=True)]
            for child in children:  # multiprocessing's resource tracker, if uvicorn's spawn started one
                if child not in workers:
                    roles[f"gateway helper {child.pid}"] = [child]
        for number, engine in enumerate(self.engines):
            with contextlib.suppress(psutil.Error):
                if engine.pid is not None:
                    main = psutil.Process(engine.pid)
                    roles[f"engine {number}"] = [main, *main.children(recursive=True)]
        if self.redis.process is not None:
            roles["redis"] = [psutil.Process(self.redis.process.pid)]
        return roles

    def kill_engine(self, number: int) -> None:
        """SIGKILL to engine ``number``'s process group (its API server and engine core); returns once they
        are gone and its port is free."""
        engine = self.engines[number]
        assert engine.pid is not None
        os.killpg(engine.pid, signal.SIGKILL)
        engine.stop()  # reaps it; a process already dead is sent nothing
        wait_port_free(engine.port)

    def restart_engine(self, number: int) -> LocalEngine:
        """Engine ``number`` started again on the same port and event sockets; returns it, not yet ready. Call
        from the main thread: an engine ends with the thread that started it (PR_SET_PDEATHSIG)."""
        old = self.engines[number]
        fresh = LocalEngine(old.model_dir, served_model_name=old.served_model_name, port=old.port,
                            log_path=self.workdir / f"engine{number}-restarted.log", extra_env=old.extra_env,
                            extra_args=old.extra_args)
        fresh.start()
        if fresh.pid is not None:
            os.sched_setaffinity(fresh.pid, {self.core_of(number)})
        self.engines[number] = fresh
        return fresh

    def core_of(self, number: int) -> int:
        return self.cores[(-1 - number) % len(self.cores)]


def wait_port_free(port: int, timeout: float = 30) -> None:
    """Until nothing listens on ``port`` (a killed engine's socket closes with its last process)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.05)


def ingest_command(config_path: Path, folder: Path, *, quiet: bool = True) -> list[str]:
    return [sys.executable, "-m", "proxy", "ingest", str(folder), "--tenant", "rag", "--collection", COLLECTION,
            "--config", str(config_path), *(["--quiet"] if quiet else [])]


def start_gateway(config_path: Path, workdir: Path) -> subprocess.Popen[bytes]:
    """``prefixgate serve`` in its own session, so a stop can reach its workers even if the master is gone."""
    with open(workdir / "gateway.log", "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(config_path)],
                                cwd=Path(__file__).resolve().parents[2], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_gateway(process: subprocess.Popen[bytes], origin: str, workdir: Path, timeout: float = 180) -> None:
    """Until /ready answers 200 from every worker (a few asks in a row), or fail with the end of its log."""
    deadline, answered = time.monotonic() + timeout, 0
    while answered < 2 * WORKERS:
        if process.poll() is not None or time.monotonic() > deadline:
            log = (workdir / "gateway.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"prefixgate serve did not become ready:\n{log}")
        try:
            answered = answered + 1 if httpx.get(origin + "/ready", timeout=2).status_code == 200 else 0
        except httpx.HTTPError:
            answered = 0
        time.sleep(0.3)


def stop_gateway(process: subprocess.Popen[bytes], drain_s: float = 40) -> None:
    """SIGTERM (drain), then SIGKILL to its whole session if it or any worker is still there."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(drain_s)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


@contextlib.contextmanager
def running_stack(workdir: Path, first_documents: Path) -> Iterator[Stack]:
    """Redis, two engines, the first ingest, the gateway; everything stopped when the block ends."""
    cores = sorted(os.sched_getaffinity(0))
    with contextlib.ExitStack() as stops:
        redis = RedisServer(workdir)
        stops.callback(redis.stop)
        redis.start()
        engines: list[LocalEngine] = []

        def stop_engines() -> None:
            for engine in engines:
                engine.stop()

        stops.callback(stop_engines)
        for number in range(2):
            engines.append(start_engine(MODEL, workdir, core=cores[(-1 - number) % len(cores)],
                                        name=f"engine{number}", extra_args=kv_events_args()))
        port = free_port()
        config_path = workdir / "prefixgate.yaml"
        config_path.write_text(yaml.safe_dump(gateway_config(engines, redis.url, workdir, port)))
        # the first ingest (and the embedding model's one-off export) overlaps the engines' ~20 s starts
        subprocess.run(ingest_command(config_path, first_documents), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, cwd=workdir)
        for engine in engines:
            engine.wait_ready(ENGINE_START_S)
        gateway = start_gateway(config_path, workdir)
        stops.callback(stop_gateway, gateway)
        origin = f"http://127.0.0.1:{port}"
        wait_gateway(gateway, origin, workdir)
        yield Stack(workdir, config_path, redis, engines, gateway, origin, cores)
