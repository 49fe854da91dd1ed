"""``prefixgate analyze REQUESTS.jsonl``: the prefix-cache gain of the prompt policy, before deploying it.

Reads logged OpenAI chat request bodies (one JSON object per line, or batch-file lines with the
body under ``"body"``), in arrival order, and prints the prefix-cache hit rate vLLM would reach
with them as sent and as prefixgate would rewrite them (under the prompt settings of ``--config``),
plus the spans that most often break a prompt's prefix before its last user turn.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from policies.prompt.prefix_sim import CacheSimulation, PrefixIndex, render_chat, top_counts
from policies.prompt.prompt import PromptPolicy, rewrite_chat
from policies.prompt.volatile import find_volatile
from policies.refusals import Rejection
from policies.request.validate import validate_request
from proxy.auth.tenants import tenant_policies
from proxy.commands.command_config import config_or_report

Encode = Callable[[str], list[int]]


@dataclass(slots=True)
class Pass:
    """One way of sending the log (as sent, or rewritten): its cache simulation and its prefix breaks."""

    cache: CacheSimulation
    index: PrefixIndex = field(default_factory=PrefixIndex)
    breaks: list[tuple[str, str]] = field(default_factory=list)

    def add(self, body: dict[str, Any], encode: Encode) -> None:
        text, last_user = render_chat(body)
        self.cache.add(encode(text))
        shared = self.index.longest_shared(text)
        if self.index and shared < last_user:
            cause = _what_breaks(text, shared)
            if cause is not None:
                self.breaks.append(cause)
        self.index.add(text)


# Prompts sharing fewer leading characters than this (and no volatile span at the split) are
# different prompts, not one prompt broken by a changing value.
_SAME_FAMILY = 64


def _what_breaks(text: str, position: int) -> tuple[str, str] | None:
    """(kind, example) for the span at ``position``, where this prompt first differs from all earlier ones."""
    line_start = text.rfind("\n", 0, position) + 1
    line_end = text.find("\n", position)
    line = text[line_start:line_end if line_end >= 0 else len(text)]
    offset = position - line_start
    for span in find_volatile(line):
        if span.start <= offset < span.end:
            return span.kind, line[span.start:span.end]
    if position < _SAME_FAMILY:
        return None  # a different prompt altogether, not a broken prefix
    return "other text", line[max(offset - 30, 0):offset + 30].strip()


@dataclass(slots=True)
class Report:
    block_size: int
    tokenizer: str
    requests: int
    skipped: list[str]
    sent: Pass
    rewritten: Pass


def read_bodies(path: Path, skipped: list[str]) -> Iterator[dict[str, Any]]:
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                skipped.append(f"line {number}: not JSON ({exc})")
                continue
            body = record.get("body", record) if isinstance(record, dict) else record
            view = validate_request("chat", body)
            if isinstance(view, Rejection):
                skipped.append(f"line {number}: {view.message}")
                continue
            yield view.body


def analyze(path: Path, policy: PromptPolicy, encode: Encode, tokenizer: str, block_size: int) -> Report:
    skipped: list[str] = []
    sent, rewritten = Pass(CacheSimulation(block_size)), Pass(CacheSimulation(block_size))
    requests = 0
    for body in read_bodies(path, skipped):
        requests += 1
        sent.add(body, encode)
        rewritten.add(rewrite_chat(body, policy).body, encode)
    return Report(block_size, tokenizer, requests, skipped, sent, rewritten)


def format_report(report: Report) -> str:
    lines = [f"{report.requests} requests ({len(report.skipped)} skipped); block size {report.block_size} tokens; "
             f"tokens by {report.tokenizer}; unbounded cache (an upper bound)", "",
             f"{'':18}{'prompt tokens':>15}{'cached tokens':>15}{'hit rate':>10}"]
    for name, run in (("as sent", report.sent), ("after prefixgate", report.rewritten)):
        lines.append(f"{name:18}{run.cache.prompt_tokens:>15,}{run.cache.hit_tokens:>15,}{run.cache.hit_rate:>10.1%}")
    for name, run in (("as sent", report.sent), ("after prefixgate", report.rewritten)):
        lines += ["", f"What breaks prefixes before the last user turn ({name}): {len(run.breaks)} requests"]
        for kind, count, example in top_counts(run.breaks):
            lines.append(f"  {count:>7}  {kind:<12} e.g. {example[:80]}")
    if any(kind != "other text" for kind, _ in report.rewritten.breaks):
        lines += ["", "Volatile spans still break prefixes after the rewrite: spans in earlier user and assistant "
                      "turns move only with prompt.scope: history; volatile: keep moves nothing."]
    for problem in report.skipped[:10]:
        lines.append(f"skipped {problem}")
    return "\n".join(lines)


def report_json(report: Report) -> bytes:
    def summary(run: Pass) -> dict[str, Any]:
        return {"prompt_tokens": run.cache.prompt_tokens, "hit_tokens": run.cache.hit_tokens,
                "hit_rate": run.cache.hit_rate,
                "breaks": [{"kind": k, "requests": n, "example": e} for k, n, e in top_counts(run.breaks)]}
    return orjson.dumps({"requests": report.requests, "skipped": report.skipped, "block_size": report.block_size,
                         "tokenizer": report.tokenizer, "as_sent": summary(report.sent),
                         "after_prefixgate": summary(report.rewritten)}, option=orjson.OPT_INDENT_2)


def make_encoder(tokenizer: str | None, model: str) -> tuple[Encode, str]:
    """The served model's own tokenizer (tokenizer.json, or a model directory with one), else litellm's."""
    if tokenizer:
        from tokenizers import Tokenizer

        path = Path(tokenizer)
        loaded = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
        return (lambda text: loaded.encode(text, add_special_tokens=False).ids), str(path)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no price-list fetch on import
    try:
        import litellm
    except ImportError:
        raise SystemExit("prefixgate analyze: counting tokens needs litellm (pip install 'prefixgate[analyze]') "
                         "or --tokenizer with the served model's tokenizer.json") from None

    return (lambda text: list(litellm.encode(model=model, text=text))), f"litellm ({model})"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("analyze", help="estimate the prefix-cache gain on logged requests")
    parser.add_argument("requests", help="JSONL file of chat request bodies, in arrival order")
    parser.add_argument("--config", help="prefixgate config whose prompt settings to apply")
    parser.add_argument("--tenant", default="default", help="whose prompt settings to apply (default: default)")
    parser.add_argument("--block-size", type=int, default=16, help="engine KV block size in tokens (default 16)")
    parser.add_argument("--tokenizer", help="tokenizer.json, or a model directory with one (default: litellm's)")
    parser.add_argument("--model", default="gpt-4o", help="model name for litellm's tokenizer (default gpt-4o)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.block_size < 1:
        print("prefixgate analyze: --block-size must be at least 1", file=sys.stderr)
        return 2
    path = Path(args.requests)
    if not path.is_file():
        print(f"prefixgate analyze: {path}: no such file", file=sys.stderr)
        return 2
    config = config_or_report(args.config, "analyze")
    if config is None:
        return 2
    policy = tenant_policies(config, b"salts are not analyzed", extra=(args.tenant,))[args.tenant].prompt
    encode, tokenizer = make_encoder(args.tokenizer, args.model)
    report = analyze(path, policy, encode, tokenizer, args.block_size)
    if args.json:
        sys.stdout.buffer.write(report_json(report) + b"\n")
    else:
        print(format_report(report))
    return 0
