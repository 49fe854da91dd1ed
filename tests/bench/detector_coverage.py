"""Detector coverage: the share of each real-world timestamp and ID format the volatile detectors find,
and the detections on the negative corpus (text that must stay as it is).

A line counts as detected when one span covers the whole value. The formats and their lines are
tests/support/volatile_formats.py (seeded, so every run measures the same text); formats marked "not
sought" are left alone on purpose (a bare number or random string looks like much that is not volatile).

    python tests/bench/detector_coverage.py   # writes docs/detector_coverage.json and its block in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.volatile import find_volatile  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402
from tests.support.volatile_formats import FORMATS, PER_FORMAT, samples  # noqa: E402

NEGATIVES = ROOT / "tests" / "policies" / "data" / "negative_corpus.txt"


def detected(line: str, value: str) -> bool:
    start = line.index(value)
    return any(span.start <= start and span.end >= start + len(value) for span in find_volatile(line))


def measure(count: int) -> dict:
    formats = {}
    for name, (_, _, sought) in FORMATS.items():
        found = [detected(line, value) for line, value in samples(name, count)]
        formats[name] = {"sought": sought, "lines": len(found), "detected": sum(found)}
    negatives = [line for line in NEGATIVES.read_text().splitlines() if line.strip()]
    flagged = [line for line in negatives if find_volatile(line)]
    return {"formats": formats, "negative_lines": len(negatives), "negative_detections": len(flagged),
            "negative_examples": flagged[:10]}


def table(results: dict, command: str) -> str:
    rows = [f"| {name} | {'yes' if row['sought'] else 'no (left alone)'} | {row['detected']} / {row['lines']} "
            f"| {row['detected'] / row['lines']:.0%} |" for name, row in results["formats"].items()]
    return "\n".join([
        f"Command: `{command}`; run of {date.today().isoformat()} on {machine.machine()}. Result file: "
        "`docs/detector_coverage.json`.", "",
        "| format | sought | lines detected | rate |", "|---|---|---|---|", *rows, "",
        f"Negative corpus: {results['negative_detections']} detections in {results['negative_lines']} lines.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=PER_FORMAT, help="lines per format")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    results = measure(args.count)
    command = ("python tests/bench/detector_coverage.py " + " ".join(sys.argv[1:])).strip()
    block = table(results, command)
    print(block)
    write_result(args.out, "detector_coverage", {"date": date.today().isoformat(), "machine": machine.machine(),
                                                 "command": command, "lines_per_format": args.count}, results)
    write_block(args.out, "detector_coverage", block)


if __name__ == "__main__":
    main()
