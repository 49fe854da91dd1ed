"""How well the gateway predicts output length without the client's help: the workload of
tests/bench/length_workload.py through the current predictor, exactly as the gateway runs it.

Per request, as a chat request takes the gateway's path: the tenant's prompt rewrite with the default
policy (``rewrite_chat``: volatile spans such as a clock reading move to the end), ``chat_pieces``, then
the gateway's own ``Admission.prepare`` (its length key, ``features_of`` the body, ``predict`` with
that key's history), the pool by
``choose_by_length`` between a short pool at the default ``short_threshold`` and a long one, and once
the answer ended ``Admission.finish`` records the true length into the key's history. Answers end in
arrival order (``--in-flight 0``, the best case for the history) or ``--in-flight N`` requests later.

Scores, per app and overall ("positive" = truly short, true length <= the threshold; predicted short =
the short pool was chosen, predicted p90 <= the threshold): precision = of the requests predicted short,
the share truly short; recall = of the truly short, the share predicted short; MAE = mean absolute error
of the predicted p50 against the true length; settles = requests of the app before the first one from
which it is classified right and every WINDOW of its requests in a row are >= 90 % right ("never" when
there is none); drift = the same, counted from the app's first request after its lengths changed.
Median over the seeds, [min, max]. With ``--baseline REF`` the same workloads also run through a worktree
of REF (its own copy of this script), and a second table sets the two predictors side by side.

    python tests/bench/length_prediction.py [--baseline REF] [--seeds 3] [--requests 6000] [--in-flight 0]
        [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import shutil
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path
from statistics import mean, median
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.admission.length import PoolOption, choose_by_length  # noqa: E402
from policies.admission.limits import RateLimits  # noqa: E402
from policies.admission.token_caps import TokenCaps  # noqa: E402
from policies.prompt.prompt import PromptPolicy, rewrite_chat  # noqa: E402
from policies.prompt.stable_prefix import chat_pieces  # noqa: E402
from proxy.admission.rate_limiter import MemoryLimiter  # noqa: E402
from proxy.admission.request_admission import Admission, Admitted, TenantAdmission  # noqa: E402
from proxy.admission.token_count import TokenCounter  # noqa: E402
from proxy.clock import SYSTEM_CLOCK  # noqa: E402
from proxy.config.pools import OpenAIPoolConfig  # noqa: E402
from proxy.observability.metrics import Metrics  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.length_workload import APPS, TRUTH_FIELDS, LengthRequest, workload  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402

THRESHOLD: int = OpenAIPoolConfig.model_fields["short_threshold"].default  # the pools' default short_threshold
POOLS = [PoolOption("short", "short", THRESHOLD), PoolOption("long", "long", THRESHOLD)]
APP_NAMES = [f"{app.tenant}/{app.name}" for app in APPS]
WINDOW = 50  # requests of one app in a row over which "classified well" (>= 90 % right) is judged
CEILING = "ceiling: told each answer's kind"
CEILING_SHARE = 0.95  # a kind known to be this often short goes to the short pool
BAR = {"precision": 0.95, "recall": 0.90}  # the target for the short pool
TENANT = TenantAdmission(RateLimits(), TokenCaps(), 0)  # no caps: the body reaches the predictor as sent


def admitted_body(admission: Admission, request: LengthRequest) -> tuple[Admitted, dict[str, Any]]:
    """The gateway's path to a prediction; refuses to go on if the predictor could see the truth."""
    sent = copy.deepcopy(request.body)
    body = request.body
    assert TRUTH_FIELDS.isdisjoint(body), f"the client body carries {sorted(TRUTH_FIELDS & body.keys())}"
    rewrite = rewrite_chat(body, PromptPolicy())
    admitted = admission.prepare(TENANT, rewrite.body, chat_pieces(rewrite.body), request.tenant, "chat")
    assert admitted.body == rewrite.body and TRUTH_FIELDS.isdisjoint(admitted.body), "admission changed the body"
    assert request.body == sent, "the gateway's path changed the client's body"
    return admitted, sent


async def replay(requests: list[LengthRequest], in_flight: int) -> list[dict[str, Any]]:
    """One outcome per request: its app, truth, prediction, key and pool."""
    admission = Admission(MemoryLimiter(SYSTEM_CLOCK), TokenCounter(), Metrics(), predicts=True)
    pending: list[tuple[Admitted, str, int]] = []
    outcomes = []
    for request in requests:
        admitted, _ = admitted_body(admission, request)
        prediction = admitted.prediction
        assert prediction is not None
        pool = choose_by_length(POOLS, prediction.p90).name
        outcomes.append({"app": request.app, "kind": request.kind, "true": request.true_tokens,
                         "drifted": request.drifted,
                         "p50": prediction.p50, "p90": prediction.p90, "source": prediction.source,
                         "key": admitted.length_key, "short": pool == "short"})
        pending.append((admitted, pool, request.true_tokens))
        while len(pending) > in_flight:
            done, served_by, true = pending.pop(0)
            await admission.finish(done, served_by, None, true)
    return outcomes


def settles(right: list[bool]) -> int | None:
    """Requests before the first right one from which every WINDOW in a row are >= 90 % right."""
    starts = len(right) - WINDOW + 1
    if starts <= 0:
        return None
    sums = [0]
    for ok in right:
        sums.append(sums[-1] + ok)
    good = [sums[i + WINDOW] - sums[i] >= 0.9 * WINDOW for i in range(starts)]
    first = None
    for i in range(starts - 1, -1, -1):  # the earliest start of an unbroken good run to the end
        if not good[i]:
            break
        if right[i]:
            first = i
    return first


def told_kinds(outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The outcomes of a predictor told each request's app and kind of answer (never its length): a kind
    goes short when >= CEILING_SHARE of its answers in the run are short, its p50 is theirs. What a
    predictor of the kind's distribution could do at best; the rest is each request's own draw."""
    lengths: dict[tuple[str, str], list[int]] = {}
    for o in outcomes:
        lengths.setdefault((o["app"], o["kind"]), []).append(o["true"])
    short = {kind: sum(t <= THRESHOLD for t in values) >= CEILING_SHARE * len(values)
             for kind, values in lengths.items()}
    p50 = {kind: median(values) for kind, values in lengths.items()}
    return [{**o, "short": short[o["app"], o["kind"]], "p50": p50[o["app"], o["kind"]]} for o in outcomes]


def scores(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    truly = [o["true"] <= THRESHOLD for o in outcomes]
    said = [o["short"] for o in outcomes]
    hits = sum(t and s for t, s in zip(truly, said, strict=True))
    right = [t == s for t, s in zip(truly, said, strict=True)]
    before = [ok for ok, o in zip(right, outcomes, strict=True) if not o["drifted"]]
    after = [ok for ok, o in zip(right, outcomes, strict=True) if o["drifted"]]
    return {"requests": len(outcomes), "truly_short": sum(truly) / len(outcomes),
            "predicted_short": sum(said) / len(outcomes), "accuracy": sum(right) / len(outcomes),
            "precision": hits / sum(said) if any(said) else None, "recall": hits / sum(truly) if any(truly) else None,
            "p50_mae": mean(abs(o["p50"] - o["true"]) for o in outcomes),
            "from_history": sum(o["source"] == "history" for o in outcomes) / len(outcomes),
            "keys": len({o["key"] for o in outcomes}), "settles": settles(before),
            "drift_recovery": settles(after) if after else None, "drifts": bool(after)}


def evaluate(seed: int, requests: int, in_flight: int) -> dict[str, Any]:
    outcomes = asyncio.run(replay(workload(seed, requests), in_flight))
    overall, ceiling = scores(outcomes), scores(told_kinds(outcomes))
    for row in (overall, ceiling):  # learning speeds are an app's, not a mix's
        row.update(settles=None, drift_recovery=None, drifts=False)
    ceiling.update(keys=None, from_history=None)
    return {"overall": overall, **{name: scores([o for o in outcomes if o["app"] == name]) for name in APP_NAMES},
            CEILING: ceiling}


def spread(values: list[Any]) -> dict[str, Any]:
    """Median and range over the seeds; None (undefined, or never settled) counts as the worst."""
    if all(value is None for value in values):
        return {"median": None, "min": None, "max": None}
    ordered = sorted(values, key=lambda value: (value is None, value))
    middle = ordered[(len(ordered) - 1) // 2] if None in values else median(values)
    return {"median": middle, "min": ordered[0], "max": ordered[-1]}


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    merged = {}
    for row, first in runs[0].items():
        merged[row] = {metric: first[metric] if metric == "drifts" else spread([run[row][metric] for run in runs])
                       for metric in first}
    return merged


def cell(value: dict[str, Any], kind: str, ranged: bool = True) -> str:
    def show(number: Any) -> str:
        if number is None:
            return "never" if kind == "requests" else "—"
        return f"{100 * number:.1f} %" if kind == "share" else f"{number:.0f}"

    text = show(value["median"])
    return f"{text} [{show(value['min'])}, {show(value['max'])}]" if ranged and value["median"] is not None else text


def table(results: dict[str, Any]) -> str:
    columns = ("app", "requests", "truly short", "keys", "from history", "predicted short", "precision", "recall",
               "p50 MAE, tokens", "settles after", "recovers from drift after")
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name, row in results.items():
        cells = [name, cell(row["requests"], "count", False), cell(row["truly_short"], "share", False),
                 cell(row["keys"], "count", False), cell(row["from_history"], "share", False),
                 cell(row["predicted_short"], "share", False), cell(row["precision"], "share"),
                 cell(row["recall"], "share"), cell(row["p50_mae"], "tokens"),
                 cell(row["settles"], "requests") if name in APP_NAMES else "—",
                 cell(row["drift_recovery"], "requests") if row["drifts"] else "—"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def baseline_results(ref: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same workloads through REF's predictor: its own copy of this script, in a worktree of REF."""
    folder = Path(tempfile.mkdtemp(prefix="pg-length-"))
    tree = folder / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref], check=True,
                   capture_output=True)
    try:
        out = folder / "benchmarks.md"
        shutil.copy(tree / "docs" / "benchmarks.md", out)
        subprocess.run([sys.executable, str(tree / "tests" / "bench" / "length_prediction.py"), "--seeds",
                        str(args.seeds), "--requests", str(args.requests), "--in-flight", str(args.in_flight),
                        "--out", str(out)], check=True, capture_output=True, cwd=tree)
        return json.loads((folder / "length_prediction.json").read_text())["results"]
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)


def side_by_side(before: dict[str, Any], after: dict[str, Any], ref: str) -> str:
    columns = ("app", "precision", "recall", "p50 MAE, tokens", "settles after", "recovers from drift after")
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name, row in after.items():
        if name == CEILING:
            continue
        old = before[name]
        pairs = {metric: f"{cell(old[metric], kind, False)} → {cell(row[metric], kind, False)}"
                 for metric, kind in (("precision", "share"), ("recall", "share"), ("p50_mae", "tokens"),
                                      ("settles", "requests"), ("drift_recovery", "requests"))}
        rows.append("| " + " | ".join([
            name, pairs["precision"], pairs["recall"], pairs["p50_mae"],
            pairs["settles"] if name in APP_NAMES else "—", pairs["drift_recovery"] if row["drifts"] else "—"]) + " |")
    return f"Before ({ref}) → after (this tree), medians of the same seeds:\n\n" + "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3, help="workloads, seeded 1..N")
    parser.add_argument("--requests", type=int, default=6000, help="requests per workload")
    parser.add_argument("--in-flight", type=int, default=0, help="requests that arrive before an answer ends")
    parser.add_argument("--baseline", help="a git ref whose predictor runs the same workloads, side by side")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    runs = [evaluate(seed, args.requests, args.in_flight) for seed in range(1, args.seeds + 1)]
    results = medians(runs)
    before = baseline_results(args.baseline, args) if args.baseline else None
    command = command_line("length_prediction.py", sys.argv[1:])
    when = date.today().isoformat()
    overall = results["overall"]
    meets = all((overall[metric]["median"] or 0) >= bar for metric, bar in BAR.items())
    block = "\n".join([
        f"Command: `{command}`; run of {when} on {machine.machine()}. {args.seeds} seeded workloads of "
        f"{args.requests} requests of {len(APPS)} apps (tests/bench/length_workload.py), replayed through "
        f"`Admission.prepare` and `finish` as the gateway runs them, answers ending "
        + ("in arrival order" if args.in_flight == 0 else f"{args.in_flight} requests later")
        + f"; short pool at the default `short_threshold` of {THRESHOLD} tokens. Positive = truly short (true length "
        f"<= {THRESHOLD}); precision = of the requests sent to the short pool, the share truly short; recall = of "
        "the truly short, the share sent to the short pool; p50 MAE = mean absolute error of the predicted p50; "
        f"settles after = the app's requests before the first right one from which every {WINDOW} in a row are "
        ">= 90 % right; recovers = the same from the first request after the app's lengths changed; keys = distinct "
        "length histories the requests were looked up under. The last row is no predictor: it is told each "
        "request's hidden kind of answer (a classifier's label, an agent's tool call or final answer, code before "
        f"or diffs after the change...) and sends a kind short when >= {CEILING_SHARE:.0%} of its answers are, "
        "which bounds what a predictor of each kind's distribution can reach; the rest of each length is the "
        "request's own draw. Median of the seeds [min, max]; the figures without a range are medians too.", "",
        table(results), "",
        *([side_by_side(before, results, args.baseline), ""] if before is not None else []),
        f"The target: precision >= {BAR['precision']:.0%} and recall >= {BAR['recall']:.0%}: "
        + ("met." if meets else "not met."), "", "Result file: `docs/length_prediction.json`."])
    write_result(Path(args.out), "length_prediction", {
        "date": when, "machine": machine.machine(), "command": command, "threshold": THRESHOLD, "window": WINDOW,
        "bar": BAR, "seeds": list(range(1, args.seeds + 1)), "runs": runs, "baseline": args.baseline,
        "baseline_results": before}, results)
    write_block(Path(args.out), "length_prediction", block)
    print(table(results))


if __name__ == "__main__":
    main()
