"""``vllm bench serve``, vLLM's own load generator, pointed at prefixgate instead of the engine, unchanged:
its chat and Responses backends both complete every request through the gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.embedded import Embedded

pytestmark = pytest.mark.engine

PROMPTS = 6


@pytest.mark.parametrize(("backend", "endpoint"), [("openai-chat", "/v1/chat/completions"),
                                                   ("openai-responses", "/v1/responses")])
def test_vllm_bench_serve_completes_every_request_through_prefixgate(embedded: Embedded, tmp_path: Path,
                                                                      backend: str, endpoint: str) -> None:
    # proxy.engine.main is vLLM's own command line (it only answers vLLM's version lookup for the CPU build)
    command = [sys.executable, "-m", "proxy.engine.main", "bench", "serve", "--backend", backend,
               "--base-url", embedded.proxy, "--endpoint", endpoint, "--model", embedded.model,
               "--tokenizer", str(embedded.model_folder), "--dataset-name", "random", "--random-input-len", "48",
               "--random-output-len", "6", "--num-prompts", str(PROMPTS), "--ignore-eos", "--save-result",
               "--result-dir", str(tmp_path), "--result-filename", "result.json"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["completed"] == PROMPTS and result.get("failed", 0) == 0, result
    assert result["total_output_tokens"] == PROMPTS * 6
