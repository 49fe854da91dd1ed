"""Embedders: the remote one keeps input order; the local one loads offline (the micro-batcher in front of
either is tested in test_micro_batch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from proxy.retrieval.embeddings import RemoteEmbeddings
from tests.support.fake_server import FakeServer


async def test_remote_embeddings_come_back_in_input_order(fake: FakeServer) -> None:
    embedder = RemoteEmbeddings(fake.base_url, "fake-model", dimensions=3, timeout=5)
    try:
        assert await embedder.embed(["a", "b"]) == [[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]]
        assert fake.app.stats.last_body == {"model": "fake-model", "input": ["a", "b"]}
    finally:
        await embedder.aclose()


def test_ingest_refuses_missing_paths_and_an_empty_command(tmp_path: Path) -> None:
    env = {**os.environ, "PREFIXGATE_DATA_DIR": str(tmp_path)}
    for args, message in ((["nowhere.md"], "no such file or directory: nowhere.md"), ([], "give PATH")):
        done = subprocess.run([sys.executable, "-m", "proxy", "ingest", *args, "--tenant", "t"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
