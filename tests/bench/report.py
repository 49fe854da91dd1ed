"""Benchmark results go into docs/benchmarks.md between `<!-- NAME:start -->` and `<!-- NAME:end -->`."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Arguments a command line records that name where its output went or restate the caption: not part of
# what was measured, and often a path outside the repository.
UNRECORDED = ("--out", "--where", "--baseline-result")
# An absolute path on a machine's disk (not a URL's path, not an endpoint such as /metrics).
_ABSOLUTE = re.compile(r"(?<![\w:/.])/(?:root|home|tmp|work|usr|opt|var|mnt|srv|data|scratch|run|private|Users|nix)"
                       r"(?:/[\w.@+-]+)*")


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


def command_line(script: str, argv: Iterable[str], drop: Iterable[str] = UNRECORDED) -> str:
    """The command as a reader types it from the repository root: ``python tests/bench/SCRIPT`` and its
    arguments, quoted where needed, without those in ``drop`` (where the output went, the caption) and
    with paths in the repository relative to it."""
    argv, drop = list(argv), tuple(drop)
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in drop:
            skip = "=" not in arg
            continue
        kept.append(portable(arg))
    return shlex.join(["python", f"tests/bench/{script}", *kept])


def portable(value: Any) -> Any:
    """``value`` with every absolute path made relative to the repository, or, outside it, cut to its file
    name: a result file records no machine's folders."""
    if isinstance(value, str):
        return _ABSOLUTE.sub(_relative, value)
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [portable(item) for item in value]
    return value


def _relative(match: re.Match[str]) -> str:
    path = Path(match.group(0))
    try:
        return str(path.relative_to(ROOT)) or "."
    except ValueError:
        return path.name


def write_result(out: Path, name: str, meta: dict[str, Any], results: Any) -> None:
    """A run's numbers to NAME.json beside ``out``: the result file its markdown block is written from.
    The meta's paths are written relative to the repository (``portable``)."""
    (out.parent / f"{name}.json").write_text(json.dumps({"meta": portable(meta), "results": results}, indent=1)
                                             + "\n")


def can_plot() -> bool:
    """Whether matplotlib (the ``bench`` extra) is installed; says in one line that the plot is skipped if not."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        return True
    print("plot skipped: matplotlib is not installed (pip install -e '.[bench]'); the table and result file are "
          "written", file=sys.stderr)
    return False


def publish(out: Path, name: str, meta: dict[str, Any], results: Any, table: str, caption: str,
            plot: Callable[[Any, Path], None]) -> None:
    """A run's numbers to docs/NAME.json, its plot to docs/NAME.png, its table (and the plot) into
    ``out``'s NAME block. Without matplotlib the numbers and the table are written all the same, with no
    plot and no link to one."""
    write_result(out, name, meta, results)
    if can_plot():
        plot(results, out.parent / f"{name}.png")
        table = f"{table}\n\n![{caption}]({name}.png)"
    write_block(out, name, table)
