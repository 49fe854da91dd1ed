"""Benchmark results go into docs/benchmarks.md between `<!-- NAME:start -->` and `<!-- NAME:end -->`."""

from __future__ import annotations

from pathlib import Path


def replace_block(text: str, name: str, block: str) -> str:
    """``text`` with the NAME block's contents replaced by ``block`` (appended when there is none)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{block}\n{end}"
    if start in text:
        head, rest = text.split(start, 1)
        return head + block + rest.split(end, 1)[1]
    return text + ("\n" if text else "") + block + "\n"


def write_block(path: Path, name: str, block: str) -> None:
    path.write_text(replace_block(path.read_text() if path.exists() else "", name, block))
