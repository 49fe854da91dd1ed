"""When a template's own answers may place it: how often a template whose last N answers all fell a margin or more
to one side of the short pool's threshold answers on that side the next time.

The gateway routes such a template by its own history, whatever the pool-wide recall (``LengthHistory.decided``,
``DECISIVE`` answers, ``DECISIVE_MARGIN``); this measures the rule, and the N and margin around the shipped ones,
on the prediction bench's workload (tests/bench/length_workload.py: seven apps, two of which drift halfway) and on a
clear-cut one (a classifier of 1-3 tokens and a writer of about 600, which never straddle the threshold). Each
request is keyed as the gateway keys it (the default rewrite, ``chat_pieces``, ``length_key``) and its true length
recorded after it, in arrival order.

Per (N, margin): ``decided``, the share of requests whose template was decided; ``same_side``, of those, the
share whose answer fell on the decided side; ``long_in_short``, answers over the threshold from a template decided
short (what a short pool pays for); ``short_in_long``, the reverse. Median over the seeds, [min, max].

    python tests/bench/decisive_templates.py [--seeds 3] [--requests 6000] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.admission.length import DECISIVE, DECISIVE_MARGIN, LengthHistory, length_key  # noqa: E402
from policies.prompt.prompt import PromptPolicy, rewrite_chat  # noqa: E402
from policies.prompt.stable_prefix import chat_pieces  # noqa: E402
from proxy.config.pools import OpenAIPoolConfig  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.length_workload import MODEL, LengthRequest, chat, words, workload  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402

THRESHOLD: int = OpenAIPoolConfig.model_fields["short_threshold"].default
ANSWERS = (4, 6, DECISIVE, 12)
MARGINS = (1.0, 1.5, DECISIVE_MARGIN)


def clear_cut(seed: int, requests: int) -> list[LengthRequest]:
    """Two apps whose answers never straddle the threshold: a ticket classifier and an article writer."""
    rng = random.Random(seed)
    out = []
    for _ in range(requests):
        if rng.random() < 0.5:
            body = chat("Label the ticket: bug, billing or other.", words(rng, rng.randint(10, 60)))
            out.append(LengthRequest("acme", "acme/classifier", body, rng.randint(1, 3), False, "label"))
        else:
            body = chat("You write long articles for the blog.", words(rng, rng.randint(10, 60)))
            tokens = max(520, round(rng.gauss(600, 40)))
            out.append(LengthRequest("acme", "acme/writer", body, tokens, False, "article"))
    return out


def _side(last: list[int], margin: float) -> str | None:
    if max(last) * margin <= THRESHOLD:
        return "short"
    if min(last) >= THRESHOLD * margin:
        return "long"
    return None


def score(requests: list[LengthRequest]) -> dict[str, dict[str, float]]:
    """Per ``N/margin``: the shares and counts above; the shipped point read through ``LengthHistory.decided``."""
    histories: dict[int, LengthHistory] = defaultdict(LengthHistory)
    tallies: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for request in requests:
        body = rewrite_chat(request.body, PromptPolicy()).body
        json_answer = isinstance(body.get("response_format"), dict)
        history = histories[length_key(chat_pieces(body), True, request.tenant, MODEL, json_answer)]
        truly_short = request.true_tokens <= THRESHOLD
        recent = list(history.recent)
        for answers in ANSWERS:
            for margin in MARGINS:
                side = _side(recent[-answers:], margin) if len(recent) >= answers else None
                if answers == DECISIVE and margin == DECISIVE_MARGIN:
                    assert side == history.decided(THRESHOLD)  # the gateway's own rule, at the shipped point
                tally = tallies[f"{answers}/{margin:g}"]
                tally["requests"] += 1
                if side is not None:
                    tally["decided"] += 1
                    tally["same_side"] += truly_short == (side == "short")
                    tally["long_in_short"] += side == "short" and not truly_short
                    tally["short_in_long"] += side == "long" and truly_short
        history.observe(request.true_tokens)
    return {point: {"decided": tally["decided"] / tally["requests"],
                    "same_side": tally["same_side"] / tally["decided"] if tally["decided"] else 0.0,
                    "long_in_short": tally["long_in_short"], "short_in_long": tally["short_in_long"]}
            for point, tally in tallies.items()}


def summary(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    return {point: {name: {"median": median(run[point][name] for run in runs),
                           "min": min(run[point][name] for run in runs),
                           "max": max(run[point][name] for run in runs)} for name in runs[0][point]}
            for point in runs[0]}


def table(figures: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    def cell(value: dict[str, float], form: str) -> str:
        return f"{value['median']:{form}} [{value['min']:{form}}, {value['max']:{form}}]"

    lines = ["| last N answers / margin | decided (share of requests) | answered on that side | long answers "
             "decided short | short answers decided long |", "|---|---|---|---|---|"]
    for point, values in figures.items():
        shipped = " (default)" if point == f"{DECISIVE}/{DECISIVE_MARGIN:g}" else ""
        lines.append(f"| {point}{shipped} | {cell(values['decided'], '.3f')} | {cell(values['same_side'], '.4f')} | "
                     f"{cell(values['long_in_short'], '.0f')} | {cell(values['short_in_long'], '.0f')} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--out", type=Path, default=None, help="docs/benchmarks.md to write the section into")
    args = parser.parse_args()
    seeds = range(1, args.seeds + 1)
    results = {"mixed": summary([score(workload(seed, args.requests)) for seed in seeds]),
               "clear_cut": summary([score(clear_cut(seed, args.requests)) for seed in seeds])}
    command = command_line("decisive_templates.py", sys.argv[1:])
    when = date.today().isoformat()
    block = [f"Command: `{command}`; run of {when} on {machine.machine()}. {args.seeds} seeded workloads of "
             f"{args.requests} requests each, a short threshold of {THRESHOLD} tokens; median [min, max] over the "
             "seeds. The prediction bench's mix of seven apps:", "", *table(results["mixed"]), "",
             "Two clear-cut apps (a classifier of 1-3 tokens, a writer of about 600):", "",
             *table(results["clear_cut"])]
    print("\n".join(block))
    if args.out is not None:
        meta = {"date": when, "machine": machine.machine(), "command": command, "threshold": THRESHOLD,
                "seeds": args.seeds, "requests": args.requests}
        write_result(args.out, "decisive_templates", meta, results)
        write_block(args.out, "decisive-templates", "\n".join(block))


if __name__ == "__main__":
    main()
