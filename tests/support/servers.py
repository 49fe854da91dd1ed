"""Run an ASGI app under a real uvicorn server in a background thread, on a free loopback port."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from proxy.engine.process import free_port

__all__ = ["free_port", "serve_in_thread"]


@contextmanager
def serve_in_thread(app: Any, port: int | None = None, **options: Any) -> Iterator[str]:
    """Yield the server's base URL (http://127.0.0.1:PORT) while it runs; stop it afterwards."""
    port = port or free_port()
    config = uvicorn.Config(app, **{"host": "127.0.0.1", "port": port, "log_level": "warning", "access_log": False,
                                    "loop": "asyncio", "http": "httptools", "lifespan": "on", **options})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"server on port {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
