"""Claude Code and the Codex CLI, unchanged (pinned in tests/agents/package-lock.json, installed by `make test`),
against a real engine through prefixgate: two turns each (`claude -p`, then `--continue`; `codex exec`, then
`codex exec resume --last`), all finishing without an error, and each second turn's prompt (Claude Code's some
28,000 of the tiny model's tokens: its tools, system text and first turn) read from the engine's prefix cache, by
the engine's own metrics.

Codex names the model (here the engine's), so it sends its tools as plain Responses tools, which vLLM takes.
Claude Code reports an answer that stops at its ``max_tokens`` as an error, and the tiny model's random words never
end by themselves. So the engine here serves the tiny model with one in twenty of its tokens as end-of-answer
tokens (its ``generation_config.json``), and Claude Code's sampled answers end within some tens of tokens, as a real
model's short answers do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from proxy.engine.process import LocalEngine, free_port
from tests.support.embedded import Embedded, running
from tests.support.metrics_text import sample_sum

pytestmark = pytest.mark.engine

AGENTS = Path(__file__).resolve().parents[1] / "agents"
CLAUDE = AGENTS / "node_modules" / ".bin" / "claude"


@pytest.fixture
def ending_engine(embedded: Embedded, tmp_path: Path) -> Iterator[LocalEngine]:
    """The tiny model, whose answers end: every twentieth token id ends one."""
    model = tmp_path / "model"
    shutil.copytree(embedded.model_folder, model)
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, *range(3, 4096, 20)]}))
    engine = LocalEngine(model, served_model_name=embedded.model, port=free_port(), log_path=tmp_path / "engine.log",
                         extra_args=["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"])
    with running(engine) as started:
        yield started


def _engine_cache(engine: LocalEngine) -> tuple[float, float]:
    text = httpx.get(engine.origin + "/metrics", timeout=10).text
    return sample_sum(text, "vllm:prefix_cache_hits_total"), sample_sum(text, "vllm:prefix_cache_queries_total")


def _claude(gateway: str, model: str, home: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": gateway,
           "ANTHROPIC_API_KEY": "sk-agent-0123456789", "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    return subprocess.run([str(CLAUDE), "-p", *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)


def test_claude_code_finishes_two_turns_and_the_second_finds_its_prefix_cached(
        ending_engine: LocalEngine, start_proxy: Callable[..., str], tmp_path: Path) -> None:
    assert CLAUDE.exists(), "Claude Code is not installed: `make agents` installs tests/agents/package-lock.json"
    model = ending_engine.served_model_name
    gateway = start_proxy({"pools": [{"name": "engine", "replicas": [ending_engine.base_url], "models": [model]}]})
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    first = _claude(gateway, model, home, project, "Add a multiply function to calc.py")
    assert first.returncode == 0, first.stderr[-2000:] + first.stdout[-2000:]
    hits, queries = _engine_cache(ending_engine)
    second = _claude(gateway, model, home, project, "--continue", "Now add a docstring")
    assert second.returncode == 0, second.stderr[-2000:] + second.stdout[-2000:]
    more_hits, more_queries = _engine_cache(ending_engine)
    assert more_queries - queries > 20_000  # the second turn's whole prompt, at least
    assert (more_hits - hits) / (more_queries - queries) > 0.9


CODEX = AGENTS / "node_modules" / ".bin" / "codex"


def _codex(gateway: str, model: str, home: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        f'model_provider = "prefixgate"\nmodel = "{model}"\n\n[model_providers.prefixgate]\nname = "prefixgate"\n'
        f'base_url = "{gateway}/v1"\nenv_key = "AGENT_API_KEY"\nwire_api = "responses"\n')
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "AGENT_API_KEY": "sk-agent-0123456789",
           "TERM": "xterm", "LANG": "C.UTF-8", "SHELL": "/bin/bash"}
    return subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_codex_finishes_two_turns_and_the_second_finds_its_prefix_cached(
        ending_engine: LocalEngine, start_proxy: Callable[..., str], tmp_path: Path) -> None:
    assert CODEX.exists(), "Codex is not installed: `make agents` installs tests/agents/package-lock.json"
    model = ending_engine.served_model_name
    gateway = start_proxy({"pools": [{"name": "engine", "replicas": [ending_engine.base_url], "models": [model]}]})
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    first = _codex(gateway, model, home, project, "Add a multiply function to calc.py")
    assert first.returncode == 0, first.stderr[-2000:] + first.stdout[-2000:]
    hits, queries = _engine_cache(ending_engine)
    second = _codex(gateway, model, home, project, "resume", "--last", "Now add a docstring")
    assert second.returncode == 0, second.stderr[-2000:] + second.stdout[-2000:]
    more_hits, more_queries = _engine_cache(ending_engine)
    assert more_queries - queries > 5_000
    assert (more_hits - hits) / (more_queries - queries) > 0.9
