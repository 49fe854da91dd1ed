"""pyproject.toml builds without setuptools' deprecation warnings (the license as a table was one)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
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


BUILD = "import sys; from setuptools.build_meta import build_wheel; print(build_wheel(sys.argv[1]))"


def test_the_wheel_holds_every_subpackage_and_the_files_read_at_run_time(tmp_path: Path) -> None:
    """A `pip install .` (not editable) gets the Lua script the shared rate limiter loads and the OpenAPI
    document /openapi.json serves, and every package under proxy/."""
    source = tmp_path / "source"  # a copy, so no build/ folder of an earlier build can stand in for this one
    for package in ("proxy", "policies"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path)], cwd=source, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(tmp_path / done.stdout.split()[-1]) as wheel:
        names = set(wheel.namelist())
    assert {"proxy/admission/rate_limiter.lua", "proxy/http/openapi.yaml", "proxy/__main__.py"} <= names
    packages = {str(p.relative_to(ROOT)) for p in (ROOT / "proxy").rglob("__init__.py")}
    assert packages and packages <= names
