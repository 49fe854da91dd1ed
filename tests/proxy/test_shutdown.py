"""SIGTERM to `prefixgate serve`: it stops taking new connections, lets the streams in flight finish
(up to uvicorn's graceful-shutdown deadline, 30 s), then exits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import yaml

from proxy.engine import free_port
from tests.conftest import FakeServer, pool


def test_sigterm_lets_streams_in_flight_finish_and_refuses_new_connections(fake: FakeServer, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"server": {"port": port}, "pools": [pool("p", fake.base_url)],
                                      "data_dir": str(tmp_path)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
    process = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve", "--config", str(config)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    origin = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(origin + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, "prefixgate did not start"
            time.sleep(0.2)
        received: list[bytes] = []
        body = {"model": "fake-model", "stream": True, "fake_tokens": 20, "fake_delay_ms": 100,
                "messages": [{"role": "user", "content": "a long answer, please"}]}

        def stream() -> None:
            with httpx.stream("POST", origin + "/v1/chat/completions", json=body, timeout=30) as answer:
                received.extend(answer.iter_bytes())

        reader = threading.Thread(target=stream)
        reader.start()
        started = time.monotonic()
        while not received:  # the stream is under way
            assert time.monotonic() - started < 10 and reader.is_alive(), "the stream did not start"
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        refused = False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
        except OSError:
            refused = True
        reader.join(30)
        assert process.wait(30) == 0
        text = b"".join(received).decode()
        assert refused, "a new connection was accepted after SIGTERM"
        assert text.count('"chat.completion.chunk"') >= 20 and text.rstrip().endswith("data: [DONE]"), text[-300:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
