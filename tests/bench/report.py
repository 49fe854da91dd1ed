"""Benchmark results go into docs/benchmarks.md between `<!-- NAME:start -->` and `<!-- NAME:end -->`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


def write_result(out: Path, name: str, meta: dict[str, Any], results: Any) -> None:
    """A run's numbers to NAME.json beside ``out``: the result file its markdown block is written from."""
    (out.parent / f"{name}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")


def publish(out: Path, name: str, meta: dict[str, Any], results: Any, table: str, caption: str,
            plot: Callable[[Any, Path], None]) -> None:
    """A run's numbers to docs/NAME.json, its plot to docs/NAME.png, its table (and the plot) into
    ``out``'s NAME block."""
    write_result(out, name, meta, results)
    plot(results, out.parent / f"{name}.png")
    write_block(out, name, f"{table}\n\n![{caption}]({name}.png)")
