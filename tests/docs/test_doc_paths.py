"""Every file README.md and docs/ name exists, and every test they cite is there, so a move or a
rename cannot leave the docs pointing at nothing."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A file name with a known suffix (whole: `kv_events.shared_load` names no .sh file), with an optional folder
# path before it and a test name after it.
NAMED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.(?:py|jsonl|json|png|yaml|yml|sh|lua|md)(?![\w-]))(?:::(\w+))?")
OUTSIDE = ("deploy/compose.env.example",)  # written by the user from an example the docs name
NOT_OURS = {"tokenizer.json", "config.json", "docker-compose.override.yml", "requests.jsonl", "embedded.yaml",
            "prefixgate.yaml", "values.yaml", "config.yaml", "bench-out",
            "edge_config.json", "segment.json"}  # the last two: Qdrant Edge's own files inside a shard


@cache
def _files_named(name: str) -> tuple[Path, ...]:
    return tuple(p for p in ROOT.rglob(name) if ".venv" not in p.parts and ".git" not in p.parts)


def _missing(doc: Path) -> list[str]:
    missing = []
    for line_number, line in enumerate(doc.read_text().splitlines(), 1):
        for match in NAMED.finditer(line):
            path, test = match.group(1), match.group(2)
            if path.startswith(("http", "www.")) or Path(path).name.lower() in NOT_OURS or path in OUTSIDE:
                continue
            candidates = [ROOT / path] if "/" in path else list(_files_named(path))
            found = [c for c in candidates if c.exists()]
            if not found and "/" in path and not path.startswith(("docs/", "tests/", "deploy/", "proxy/",
                                                                  "policies/", ".ci/")):
                continue  # a path on the user's machine or in a container, not in this repository
            if not found:
                missing.append(f"{doc.name}:{line_number}: {path}")
            elif test and not any(re.search(rf"def {test}\b", c.read_text()) for c in found):
                missing.append(f"{doc.name}:{line_number}: {path}::{test}")
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_file_and_test_a_doc_names_exists(doc: Path) -> None:
    assert not _missing(doc)
