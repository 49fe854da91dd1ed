"""How far the free token estimate is from a real tokenizer.

Admission counts prompt tokens on every request; with no tokenizer.json configured it estimates
them (proxy/admission/token_count.py: characters / 4, plus 3/8 per extra UTF-8 byte). This measures the
estimate's error per kind of text against the BPE tokenizer litellm bundles offline (OpenAI's
cl100k_base, through litellm.encode), and the plain characters / 4 rule beside it, so the error
is documented rather than guessed. Texts: the retrieval test corpus (English prose), the
volatile detectors' negative corpus (mixed short lines: prose, code, numbers), tool schemas as
JSON, Python source from this repository, and Chinese prose.

    python tests/bench/token_estimate.py [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date
from pathlib import Path
from statistics import median

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from policies.prompt.stable_prefix import CHARS_PER_TOKEN  # noqa: E402
from proxy.admission.token_count import estimate_prompt_tokens  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402
from tests.support.corpus import DOCUMENTS  # noqa: E402

MODEL = "gpt-3.5-turbo"  # cl100k_base
# Full-width commas are Chinese punctuation, not look-alikes of ASCII ones.
CHINESE = [
    "北风公司的全职员工每年享有二十五天带薪假期，未使用的假期最多可以结转五天到下一年。",  # noqa: RUF001
    "新父母可以获得十六周的全薪育儿假，可以在孩子出生后的第一年内分成两段使用。",  # noqa: RUF001
    "出差期间的餐费每天最多报销四十五欧元，请在三十天内通过财务门户提交收据。",  # noqa: RUF001
] * 4


def texts() -> dict[str, list[str]]:
    negative = (ROOT / "tests/policies/data/negative_corpus.txt").read_text().splitlines()
    tools = [orjson.dumps({"type": "function", "function": {
        "name": f"lookup_{index}", "description": text[:80],
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                       "required": ["query"]}}}).decode() for index, (_, text, _) in enumerate(DOCUMENTS[:20])]
    source = [text for path in sorted((ROOT / "policies").glob("*.py")) if (text := path.read_text())]
    return {"English prose": [text for _, text, _ in DOCUMENTS],
            "mixed short lines": [t for t in negative if t.strip()], "tool schemas (JSON)": tools,
            "Python source": source, "Chinese prose": CHINESE}


def quarter_of_characters(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def summary(errors: list[float]) -> str:
    ordered = sorted(errors)
    return f"{median(errors):+.0%} | {ordered[0]:+.0%} to {ordered[-1]:+.0%}"


def main() -> None:
    import litellm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    rows, results = [], {}
    for kind, samples in texts().items():
        ours, quarter = [], []
        for text in samples:
            real = len(litellm.encode(model=MODEL, text=text))
            ours.append((estimate_prompt_tokens([text]) - real) / real)
            quarter.append((quarter_of_characters(text) - real) / real)
        rows.append(f"| {kind} | {len(samples)} | {summary(ours)} | {summary(quarter)} |")
        results[kind] = {"texts": len(samples), "estimate_errors": ours, "quarter_errors": quarter}
    block = "\n".join([
        "Command: `python tests/bench/token_estimate.py` (error = (estimate - real) / real per text; real = "
        f"cl100k_base through litellm.encode, {machine.version('litellm') or 'litellm'})", "",
        "| text | texts | prefixgate's estimate: median | range | characters / 4: median | range |",
        "|---|---|---|---|---|---|", *rows,
    ])
    print(block)
    write_result(args.out, "token_estimate", {"date": date.today().isoformat(), "machine": machine.machine(),
                                              "litellm": machine.version("litellm")}, results)
    write_block(args.out, "token_estimate", block + "\n\nResult file: `docs/token_estimate.json`.")


if __name__ == "__main__":
    main()
