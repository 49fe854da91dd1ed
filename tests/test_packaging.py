"""pyproject.toml builds without setuptools' deprecation warnings (the license as a table was one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREPARE = "import sys; from setuptools.build_meta import prepare_metadata_for_build_wheel as p; print(p(sys.argv[1]))"


def test_the_wheel_metadata_builds_without_warnings_and_names_the_license(tmp_path: Path) -> None:
    """The step of `pip install .` that reads pyproject.toml, run by the backend pip would run."""
    done = subprocess.run([sys.executable, "-c", PREPARE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    metadata = (tmp_path / done.stdout.split()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
