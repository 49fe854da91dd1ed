"""The demo model is built once per data dir, and the log says so only when it is built."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from proxy.engine.tiny_model import ensure_tiny_model


def test_the_model_is_built_once_and_only_the_build_is_announced(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="prefixgate"):
        built = ensure_tiny_model(tmp_path)
    assert (built / "config.json").exists() and "building the tiny demo model" in caplog.text
    caplog.clear()
    modified = (built / "config.json").stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger="prefixgate"):
        assert ensure_tiny_model(tmp_path) == built
    assert caplog.text == "" and (built / "config.json").stat().st_mtime_ns == modified
