"""`prefixgate serve` as a user runs it (the embedded-engine run is in tests/integration)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from proxy.commands.cli import main
from proxy.config.load import (
    ENV_CACHE_SALT_SECRET,
    ENV_CONFIG,
    ENV_DATA_DIR,
    ENV_HOST,
    ENV_PORT,
    ENV_UPSTREAM,
)
from tests.support.fake_server import FakeServer
from tests.support.old_store import old_format_folder
from tests.support.processes import Spawner
from tests.support.servers import free_port
from tests.support.waiting import wait_until

Run = Callable[[list[str], dict[str, str]], subprocess.Popen[str]]


@pytest.fixture
def run(spawn: Spawner) -> Run:
    """`prefixgate ARGS` in a process of its own, its output (stdout and stderr) on a pipe; a process the
    test leaves running is stopped at its end, however it ends."""

    def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFIXGATE_")}
        return spawn([sys.executable, "-m", "proxy", *args], env={**clean, **env},
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    return start


def test_bad_config_exits_with_a_message_naming_file_and_field(tmp_path: Path, run: Run) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("pools:\n  - name: a\n    replicas: [not-a-url]\n")
    process = run(["serve", "--config", str(path)], {})
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 2
    assert str(path) in output and "pools[0].replicas" in output
    assert "Traceback" not in output


def test_serve_from_environment_only(fake: FakeServer, run: Run) -> None:
    port = free_port()
    process = run(["serve"], {"PREFIXGATE_UPSTREAM": fake.base_url, "PREFIXGATE_PORT": str(port)})
    try:

        def answered() -> httpx.Response | None:
            try:
                return httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                                  json={"model": "fake-model", "messages": [{"role": "user", "content": "x"}]})
            except httpx.ConnectError:
                assert process.poll() is None, process.stdout.read()
                return None

        answer = wait_until(answered, timeout=60, interval=0.1, what="`prefixgate serve` to answer on its port")
        assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=15)
    assert process.returncode == 0, output


def test_serve_warns_about_tenants_no_request_can_be(fake: FakeServer, tmp_path: Path, run: Run) -> None:
    """Retrieval set up for acme in open mode would never be used: the operator hears it at start."""
    path = tmp_path / "open.yaml"
    path.write_text(f"pools: [{{name: p, replicas: ['{fake.base_url}']}}]\n"
                    f"data_dir: {tmp_path}\nserver: {{port: {free_port()}}}\n"
                    "tenants: {acme: {limits: {requests_per_minute: 5}}}\n")
    process = run(["serve", "--config", str(path)], {})
    try:
        assert process.stdout is not None
        lines = iter(process.stdout.readline, "")
        warning = next(line for line in lines if "tenants acme" in line or "listening on" in line)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=15)
    assert "no API key names them" in warning and "tenant 'default'" in warning, warning


def test_help_names_the_environment_and_the_embedded_engine_but_not_maintainer_tools(
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["serve", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    text = capsys.readouterr().out
    top, serve = text.split("usage: prefixgate serve", 1)
    assert "config-reference" not in top and "{serve,analyze,ingest,migrate-store}" in top
    for name in (ENV_CONFIG, ENV_UPSTREAM, ENV_HOST, ENV_PORT, ENV_DATA_DIR, ENV_CACHE_SALT_SECRET):
        assert name in serve, name
    assert "embedded vLLM CPU engine" in " ".join(serve.split())
    assert main(["config-reference", "--check"]) == 0  # still there for those who know it


def test_serve_on_a_folder_of_the_previous_embedded_store_says_to_migrate_in_one_line(tmp_path: Path,
                                                                                      run: Run) -> None:
    path = tmp_path / "retrieval.yaml"
    path.write_text(f"data_dir: {tmp_path}\nauth: {{keys: [{{tenant: acme, key: sk-acme-key-1}}]}}\n"
                    "pools: [{name: p, replicas: ['http://127.0.0.1:9/v1']}]\n"
                    "tenants: {acme: {retrieval: {collection: docs}}}\n")
    old_format_folder(tmp_path / "qdrant")
    process = run(["serve", "--config", str(path)], {})
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2 and "Traceback" not in output, output
    assert "previous embedded store" in output and "prefixgate migrate-store" in output, output
