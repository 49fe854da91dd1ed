"""Embedders: the micro-batcher shares calls among concurrent questions; the remote one keeps order."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.embeddings import MicroBatcher, RemoteEmbeddings
from tests.conftest import FakeServer


class CountingEmbedder:
    """Answers each text with [len(text)] after a short pause, like a model's forward pass."""

    dimensions = 1

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(0.02)
        if self.fail:
            raise RuntimeError("model crashed")
        return [[float(len(text))] for text in texts]

    async def aclose(self) -> None:
        return None


async def test_concurrent_questions_share_calls_and_each_gets_its_own_vector() -> None:
    embedder = CountingEmbedder()
    sizes: list[int] = []
    batcher = MicroBatcher(embedder, max_batch=8, max_wait=0.005, on_batch=sizes.append)
    texts = ["x" * n for n in range(1, 21)]
    vectors = await asyncio.gather(*(batcher.embed_one(text) for text in texts))
    assert vectors == [[float(n)] for n in range(1, 21)]
    assert len(embedder.calls) == 3 and max(sizes) == 8 and sum(sizes) == 20


async def test_texts_arriving_while_a_batch_runs_go_together_next() -> None:
    embedder = CountingEmbedder()
    batcher = MicroBatcher(embedder, max_batch=32, max_wait=0.001)
    first = asyncio.ensure_future(batcher.embed_one("first"))
    late = []
    for i in range(5):  # spaced wider than max_wait, all while the first batch is in the model (20 ms)
        await asyncio.sleep(0.003)
        late.append(asyncio.ensure_future(batcher.embed_one(f"late {i}")))
    await asyncio.gather(first, *late)
    assert embedder.calls == [["first"], [f"late {i}" for i in range(5)]]


async def test_a_lone_question_waits_only_the_short_window() -> None:
    embedder = CountingEmbedder()
    batcher = MicroBatcher(embedder, max_batch=32, max_wait=0.001)
    assert await asyncio.wait_for(batcher.embed_one("alone"), timeout=1) == [5.0]


async def test_a_failed_batch_fails_all_its_callers_and_the_next_batch_still_runs() -> None:
    embedder = CountingEmbedder(fail=True)
    batcher = MicroBatcher(embedder, max_batch=4, max_wait=0.002)
    results = await asyncio.gather(*(batcher.embed_one(str(i)) for i in range(3)), return_exceptions=True)
    assert all(isinstance(result, RuntimeError) for result in results)
    embedder.fail = False
    assert await batcher.embed_one("again") == [5.0]
    with pytest.raises(RuntimeError):
        embedder.fail = True
        await batcher.embed_one("boom")


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
        done = subprocess.run([sys.executable, "-m", "proxy.cli", "ingest", *args, "--tenant", "t"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
