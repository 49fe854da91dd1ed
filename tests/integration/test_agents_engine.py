"""Claude Code and the Codex CLI, unchanged (pinned in tests/agents/package-lock.json, installed by `make test`),
against `make serve` as it is, ports aside (the embedded engine and the gateway's defaults): two turns each
(`claude -p`, then `--continue`; `codex exec`, then `codex exec resume --last`), all finishing without an error,
and each second turn's prompt (Claude Code's some 28,000 of the tiny model's tokens: its tools, system text and
first turn) read from the engine's prefix cache, by the engine's own metrics.

Codex names the model (here the engine's), so it sends its tools as plain Responses tools, which vLLM takes.
Claude Code reports an answer that stops at its ``max_tokens`` as an error: the embedded engine's tiny model ends
its sampled answers (``engine.answers_end``), within some tens of tokens, as a real model's short answers do.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.embedded import Embedded, embedded_gateway
from tests.support.metrics_text import sample_sum

pytestmark = pytest.mark.engine

AGENTS = Path(__file__).resolve().parents[1] / "agents"
CLAUDE = AGENTS / "node_modules" / ".bin" / "claude"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    """`prefixgate serve` with nothing configured but its ports: what `make serve` runs."""
    with embedded_gateway(tmp_path_factory.mktemp("served"), as_served=True) as gateway:
        yield gateway


def _engine_counts(served: Embedded) -> tuple[float, float, float]:
    """The engine's prefix-cache hits and queries, and the tokens it has generated, in tokens."""
    text = httpx.get(served.engine + "/metrics", timeout=10).text
    return (sample_sum(text, "vllm:prefix_cache_hits_total"), sample_sum(text, "vllm:prefix_cache_queries_total"),
            sample_sum(text, "vllm:generation_tokens_total"))


def _claude(gateway: str, model: str, home: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": gateway,
           "ANTHROPIC_API_KEY": "sk-agent-0123456789", "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    return subprocess.run([str(CLAUDE), "-p", *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)


def test_claude_code_finishes_two_turns_and_the_second_finds_its_prefix_cached(
        served: Embedded, tmp_path: Path) -> None:
    assert CLAUDE.exists(), "Claude Code is not installed: `make agents` installs tests/agents/package-lock.json"
    model, gateway = served.model, served.proxy
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    before = _engine_counts(served)[2]
    first = _claude(gateway, model, home, project, "Add a multiply function to calc.py")
    assert first.returncode == 0, first.stderr[-2000:] + first.stdout[-2000:]
    hits, queries, _ = _engine_counts(served)
    second = _claude(gateway, model, home, project, "--continue", "Now add a docstring")
    assert second.returncode == 0, second.stderr[-2000:] + second.stdout[-2000:]
    more_hits, more_queries, written = _engine_counts(served)
    assert more_queries - queries > 20_000  # the second turn's whole prompt, at least
    assert (more_hits - hits) / (more_queries - queries) > 0.9
    assert written - before < 500  # answers that end by themselves, in some tens of tokens, not thousands


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
        served: Embedded, tmp_path: Path) -> None:
    assert CODEX.exists(), "Codex is not installed: `make agents` installs tests/agents/package-lock.json"
    model, gateway = served.model, served.proxy
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    before = _engine_counts(served)[2]
    first = _codex(gateway, model, home, project, "Add a multiply function to calc.py")
    assert first.returncode == 0, first.stderr[-2000:] + first.stdout[-2000:]
    hits, queries, _ = _engine_counts(served)
    second = _codex(gateway, model, home, project, "resume", "--last", "Now add a docstring")
    assert second.returncode == 0, second.stderr[-2000:] + second.stdout[-2000:]
    more_hits, more_queries, written = _engine_counts(served)
    assert more_queries - queries > 5_000
    assert (more_hits - hits) / (more_queries - queries) > 0.9
    assert written - before < 500  # answers that end by themselves, in some tens of tokens, not thousands
