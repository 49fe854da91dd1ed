"""The onnxruntime MiniLM gives torch's vectors, truncates as torch does, and exports once, whole, even when two
processes start at the same time (its speed is measured in tests/bench/embedding_speed.py, not asserted here)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from proxy.retrieval import onnx_minilm
from proxy.retrieval.embeddings import LocalMiniLM
from proxy.retrieval.onnx_minilm import ensure_exported, onnx_file
from tests.support.processes import Spawner

ROOT = Path(__file__).resolve().parents[3]
QUESTIONS = ["How do I reset my password?", "QS-1007 rate limit error", "refund", "Kann ich meinen Plan kündigen?",
             "what happens to my files when the trial ends and I have not picked a plan yet?"]
CHUNK = ("The gateway forwards each request to the upstream pool with the fewest requests in flight, and records the "
         "prompt and completion tokens it used against the tenant's budget. When a replica stops answering, it is "
         "taken out of rotation for a cooling-off period and probed again afterwards; requests already streaming "
         "from it finish or fail on their own. ")
LONG = " ".join(f"paragraph {n} of a long page about billing, plans and invoices." for n in range(80))  # > 256 tokens


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture(scope="module")
def embedders(onnx_dir: Path) -> Iterator[tuple[LocalMiniLM, LocalMiniLM]]:
    onnx = LocalMiniLM(backend="onnx", cache_dir=onnx_dir)
    torch = LocalMiniLM(backend="torch")
    yield onnx, torch


def cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    return (np.asarray(a) * np.asarray(b)).sum(axis=1)


def test_onnx_vectors_are_torch_vectors(embedders: tuple[LocalMiniLM, LocalMiniLM]) -> None:
    onnx, torch = embedders
    assert onnx.backend == "onnx" and torch.backend == "torch"
    texts = [*QUESTIONS, CHUNK, CHUNK * 2, LONG]
    for batch in ([texts[0]], texts):  # alone, and padded in a batch of mixed lengths
        vectors = onnx.encode(batch)
        assert len(vectors) == len(batch) and all(len(vector) == onnx.dimensions for vector in vectors)
        assert cosines(vectors, torch.encode(batch)).min() >= 0.999
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_long_texts_are_cut_where_torch_cuts_them(embedders: tuple[LocalMiniLM, LocalMiniLM]) -> None:
    onnx, torch = embedders
    assert onnx.max_tokens == torch.max_tokens == 256
    assert len(onnx.tokenizer(LONG, add_special_tokens=False, verbose=False)["input_ids"]) > 2 * onnx.max_tokens
    longer = LONG + " and a tail that only a model reading past its limit would see: refunds."
    vectors = onnx.encode([LONG, longer])
    assert cosines([vectors[0]], [vectors[1]])[0] >= 0.99999  # the tail was cut off
    assert cosines(vectors, torch.encode([LONG, longer])).min() >= 0.999


def test_the_tokenizer_ingestion_uses_is_the_same(embedders: tuple[LocalMiniLM, LocalMiniLM]) -> None:
    onnx, torch = embedders
    for text in (*QUESTIONS, CHUNK, LONG):
        mine = onnx.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        theirs = torch.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        assert mine["input_ids"] == theirs["input_ids"] and mine["offset_mapping"] == theirs["offset_mapping"]


async def test_embed_runs_off_the_loop_and_keeps_order(embedders: tuple[LocalMiniLM, LocalMiniLM]) -> None:
    onnx, _ = embedders
    assert await onnx.embed(["b", "a"]) == onnx.encode(["b", "a"])
    assert onnx.encode([]) == []


def test_the_export_is_kept_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, onnx_dir: Path,
                                       embedders: tuple[LocalMiniLM, LocalMiniLM]) -> None:
    exports: list[Path] = []

    def export(path: Path) -> None:
        exports.append(path)
        path.write_bytes(b"graph")

    first = ensure_exported(tmp_path, export)
    assert first == onnx_file(tmp_path) and first.read_bytes() == b"graph" and len(exports) == 1
    assert ensure_exported(tmp_path, export) == first and len(exports) == 1

    def refuse(path: Path) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_minilm, "export_graph", refuse)
    exported = onnx_file(onnx_dir)
    before = exported.stat()
    again = LocalMiniLM(backend="onnx", cache_dir=onnx_dir)  # a later start loads the file the first one wrote
    assert again.encode(["refund"]) == embedders[0].encode(["refund"])
    assert (exported.stat().st_ino, exported.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_reader_never_sees_half_an_export(tmp_path: Path) -> None:
    target = onnx_file(tmp_path)

    def export(path: Path) -> None:
        path.write_bytes(b"half")
        assert not target.exists()  # written beside the final name, not at it
        path.write_bytes(b"half and the rest")

    assert ensure_exported(tmp_path, export).read_bytes() == b"half and the rest"

    def fail(path: Path) -> None:
        path.write_bytes(b"half")
        raise RuntimeError("exporter died")

    target.unlink()
    with pytest.raises(RuntimeError, match="exporter died"):
        ensure_exported(tmp_path, fail)
    assert list(tmp_path.iterdir()) == []  # neither a target nor a staging file is left behind


def test_two_processes_exporting_at_once_both_get_a_whole_file(tmp_path: Path, spawn: Spawner,
                                                               embedders: tuple[LocalMiniLM, LocalMiniLM]) -> None:
    script = ("import json, sys; from proxy.retrieval.embeddings import LocalMiniLM; print(json.dumps("
              "LocalMiniLM(backend='onnx', cache_dir=sys.argv[1]).encode(['How do I reset my password?'])[0]))")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    racers = [spawn([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, env=env, text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [racer.communicate(timeout=300) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], [err[-2000:] for _, err in outputs]
    assert [path.name for path in tmp_path.iterdir()] == [onnx_file(tmp_path).name]  # no staging file left
    _, torch = embedders
    expected = torch.encode(["How do I reset my password?"])
    for out, _ in outputs:
        assert cosines([json.loads(out.strip().splitlines()[-1])], expected)[0] >= 0.999
    reader = LocalMiniLM(backend="onnx", cache_dir=tmp_path)
    assert cosines(reader.encode(["How do I reset my password?"]), expected)[0] >= 0.999


def test_without_onnxruntime_it_says_so_and_embeds_with_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    with pytest.raises(RuntimeError, match="onnxruntime"):
        LocalMiniLM(backend="onnx", cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="proxy.retrieval.embeddings"):
        embedder = LocalMiniLM(cache_dir=tmp_path)
    assert embedder.backend == "torch" and "onnxruntime is not installed" in caplog.text
    assert list(tmp_path.iterdir()) == []
    assert len(embedder.encode(["refund"])[0]) == embedder.dimensions


def test_a_given_model_is_used_as_it_is() -> None:
    class Model:
        tokenizer, max_seq_length = "tokenizer", 128

    embedder = LocalMiniLM(Model())
    assert embedder.backend == "torch" and embedder.tokenizer == "tokenizer" and embedder.max_tokens == 128
    with pytest.raises(ValueError, match="backend"):
        LocalMiniLM(backend="tensorflow")
