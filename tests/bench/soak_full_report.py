"""The full soak's verdicts and write-up: which failures the killed engine caused and which were lost,
what became of each ingest, how every process's memory and descriptors moved; the table, the plot, and
docs/soak_full.json with the `soak_full` block of docs/reliability.md.

A failure is put on the killed engine only when both say so: the request overlapped the engine's
kill-to-healthy window (it started before the engine was healthy again and ended after the kill), and
the gateway's own error names an engine that failed (`upstream_broken`, `upstream_unreachable`,
`upstream_timeout`, in a JSON error or as the stream's last SSE event). Anything else that is not an
answer its kind may get counts as lost.
"""

from __future__ import annotations

from collections import Counter
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from tests.bench.report import publish
from tests.bench.soak_ingest import Ingest
from tests.bench.soak_traffic import Outcome

if TYPE_CHECKING:
    from tests.bench.soak_full import Run

ENGINE_FAILURES = {"upstream_broken", "upstream_unreachable", "upstream_timeout"}
WARMUP_SHARE = 0.25
RSS_TARGET_PCT = 5.0
FDS_SLACK = 8  # descriptors a process may hold more at the end (a connection or two to a restarted engine)


def by_label(text: str, name: str, label: str) -> dict[str, float]:
    """Samples called ``name`` summed by one label's value."""
    sums: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                sums[sample.labels.get(label, "")] += sample.value
    return dict(sums)


def blame(outcome: Outcome, fault: dict[str, Any]) -> str:
    """"answered", "killed engine" or "lost"."""
    if outcome.ok:
        return "answered"
    killed, healthy = fault.get("killed_at"), fault.get("healthy_at")
    overlaps = killed is not None and outcome.ended >= killed and outcome.started <= (healthy or float("inf"))
    if overlaps and outcome.code.removeprefix("stream_error:") in ENGINE_FAILURES:
        return "killed engine"
    return "lost"


def classify(outcomes: list[Outcome], fault: dict[str, Any]) -> dict[str, Any]:
    kinds: dict[str, dict[str, Any]] = {}
    failures: dict[str, Counter[str]] = {"killed engine": Counter(), "lost": Counter()}
    examples = []
    for outcome in sorted(outcomes, key=lambda o: o.started):
        row = kinds.setdefault(outcome.kind, {"sent": 0, "answered": 0, "killed engine": 0, "lost": 0,
                                              "statuses": Counter()})
        verdict = blame(outcome, fault)
        row["sent"] += 1
        row[verdict] += 1
        row["statuses"][outcome.cause] += 1
        if verdict != "answered":
            failures[verdict][f"{outcome.kind}: {outcome.cause}"] += 1
        if verdict == "lost" and len(examples) < 20:
            examples.append({"kind": outcome.kind, "started": outcome.started, "ended": outcome.ended,
                             "cause": outcome.cause})
    for kind, row in kinds.items():  # how long its answers took: whether the rate is one the engines sustain
        seconds = sorted(o.ended - o.started for o in outcomes if o.kind == kind and o.ok)
        row["p50_s"], row["p95_s"] = (_quantile(seconds, 0.5), _quantile(seconds, 0.95)) if seconds else (None, None)
    killed = fault.get("killed_at")
    in_flight = sum(1 for o in outcomes if killed is not None and o.started <= killed <= o.ended)
    return {"by_kind": {kind: {**row, "statuses": dict(row["statuses"])} for kind, row in sorted(kinds.items())},
            "failures": {name: dict(counts) for name, counts in failures.items()}, "lost_examples": examples,
            "sent": len(outcomes), "answered": sum(1 for o in outcomes if o.ok),
            "killed_engine": sum(failures["killed engine"].values()), "lost": sum(failures["lost"].values()),
            "in_flight_at_kill": in_flight}


def _quantile(ordered: list[float], share: float) -> float:
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 2)


def after_traffic(after: dict[str, Any]) -> dict[str, Any]:
    """What was left in flight, and the gateway's own counts of routing, errors and retries."""
    gateway, engines = after.get("gateway_metrics", ""), after.get("engine_metrics", [])
    return {"gateway_in_flight": sum(by_label(gateway, "prefixgate_replica_in_flight", "replica").values()),
            "replica_choices": by_label(gateway, "prefixgate_replica_choices_total", "reason"),
            "upstream_errors": by_label(gateway, "prefixgate_upstream_errors_total", "kind"),
            "upstream_retries": sum(by_label(gateway, "prefixgate_upstream_retries_total", "pool").values()),
            "retrieval_failures": sum(by_label(gateway, "prefixgate_retrieval_failures_total", "").values()),
            "shared_cache": by_label(gateway, "prefixgate_shared_cache_total", "event"),
            "gateway_statuses": by_label(gateway, "prefixgate_requests_total", "status"),
            "engines_running": [sum(by_label(text, "vllm:num_requests_running", "").values()) for text in engines],
            # tokens made for requests that never finished: those the gateway aborted for clients that left
            "engines_aborted_tokens": [sum(by_label(text, "vllm:generation_tokens_total", "").values())
                                       - sum(by_label(text, "vllm:request_generation_tokens_sum", "").values())
                                       for text in engines],
            "engines_finished": [by_label(text, "vllm:request_success_total", "finished_reason") for text in engines]}


BALANCE_TARGET = 0.25  # in the last quarter, the engines' finished requests differ by at most this share of the larger


def last_quarter(after: dict[str, Any], quarter: dict[str, Any]) -> list[float] | None:
    """Requests each engine finished in the run's last quarter (the restarted one's counter began at its restart,
    before it); None where the reading three quarters in is missing."""
    before = quarter.get("finished")
    if not before:
        return None
    end = [sum(by_label(text, "vllm:request_success_total", "").values()) for text in after.get("engine_metrics", [])]
    return [e - b for e, b in zip(end, before, strict=True)]


def balanced(after: dict[str, Any], quarter: dict[str, Any]) -> bool:
    counts = last_quarter(after, quarter)
    if not counts or max(counts) <= 0:
        return False
    return (max(counts) - min(counts)) / max(counts) <= BALANCE_TARGET


def spans(seconds: float, fault: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Where memory is compared: after warm-up (before the engine is killed), once the restarted engine has
    been serving for 30 s, and at the end; a tenth of the run each."""
    warm, tenth = seconds * WARMUP_SHARE, max(seconds / 10, 6.0)
    settled = fault.get("healthy_at", seconds - tenth) + 30
    return {"start": (warm, warm + tenth), "settled": (min(settled, seconds - tenth), min(settled + tenth, seconds)),
            "end": (seconds - tenth, seconds)}


def growth(processes: dict[str, dict[str, Any]]) -> bool:
    """Each process's RSS and open files, from after the restart settled to the end (start-to-end mixes in
    the load the surviving engine took over), within the targets."""
    for p in processes.values():
        for since in ("start", "settled"):
            before = p[f"rss_{since}_mb"]
            p[f"rss_growth_{since}_pct"] = round(100 * (p["rss_end_mb"] - before) / before, 1)
    return all(p["rss_growth_settled_pct"] <= RSS_TARGET_PCT and p["fds_end"] <= p["fds_settled"] + FDS_SLACK
               for p in processes.values())


def judge(run: Run, ingests: list[Ingest], store: dict[str, Any], seconds: float, rate: float) -> dict[str, Any]:
    windows = spans(seconds, run.fault)
    processes = run.samples.windows(windows)
    requests = classify(run.outcomes, run.fault)
    return {
        "seconds": seconds, "rate": rate, "fault": run.fault, "versions": run.versions, **requests,
        "after": after_traffic(run.after),
        "last_quarter": last_quarter(run.after, run.quarter),
        "ingests": {**store, "runs": [{"batch": i.batch, "kind": i.kind, "documents": len(i.words),
                                       "started": i.started, "ended": i.ended, "returncode": i.returncode,
                                       "midway": i.midway} for i in ingests]},
        "processes": processes, "windows": windows,
        "verdicts": {"no_request_lost_but_the_killed_engines": requests["lost"] == 0,
                     "no_ingest_lost_or_half_visible": not (store["lost"] or store["killed_visible"]
                                                            or store["killed_not_midway"] or store["failed"]),
                     "no_unbounded_growth": growth(processes),
                     "engines_within_25_percent_in_the_last_quarter": balanced(run.after, run.quarter)},
        "samples": {role: [[r.at, r.rss_mb, r.fds] for r in readings]
                    for role, readings in run.samples.by_role.items()},
    }


def table(results: dict[str, Any], command: str) -> str:
    v = results["versions"]
    lines = [f"Command: `{command}`; run of {date.today().isoformat()} on {v.get('machine')}; engines "
             f"{v.get('engine')}, {v.get('redis')}, {v.get('python packages')}.", "",
             "| kind | sent | answered | failed: killed engine | lost | statuses | p50 / p95 s |",
             "|---|---|---|---|---|---|---|"]
    for kind, row in results["by_kind"].items():
        statuses = ", ".join(f"{cause}: {n}" for cause, n in sorted(row["statuses"].items()))
        lines.append(f"| {kind} | {row['sent']} | {row['answered']} | {row['killed engine']} | {row['lost']} | "
                     f"{statuses} | {row['p50_s']} / {row['p95_s']} |")
    lines += ["", _request_line(results)]
    lines += ["", _ingest_line(results["ingests"]), "", _after_line(results["after"]), "", _balance_line(results), ""]
    return "\n".join(lines + _process_lines(results))


def _process_lines(results: dict[str, Any]) -> list[str]:
    w = {name: f"{start:.0f}-{min(end, results['seconds']):.0f} s" for name, (start, end) in results["windows"].items()}
    lines = [f"| process | RSS (MB) after warm-up ({w['start']}) | after the restart settled ({w['settled']}) | "
             f"at the end ({w['end']}) | growth from warm-up / from settled | open files at the three |",
             "|---|---|---|---|---|---|"]
    for role, p in results["processes"].items():
        restarted = p["restarted"]
        since_start = "restarted" if restarted else f"{p['rss_growth_start_pct']:+} %"
        lines.append(f"| {role}{' (killed and restarted)' if restarted else ''} | {p['rss_start_mb']} | "
                     f"{p['rss_settled_mb']} | {p['rss_end_mb']} | {since_start} / {p['rss_growth_settled_pct']:+} % | "
                     f"{p['fds_start']:g} / {p['fds_settled']:g} / {p['fds_end']:g} |")
    verdict = "yes" if results["verdicts"]["no_unbounded_growth"] else "NO"
    return [*lines, "", f"Medians over each span. No unbounded growth (from settled to the end, each process within "
                        f"+{RSS_TARGET_PCT:g} % RSS and +{FDS_SLACK} open files): {verdict}. Gateway log: "
                        f"{results['gateway_log']['count']} errors or tracebacks"
                        f"{': ' if results['gateway_log']['examples'] else ''}"
                        f"{'; '.join(sorted(set(results['gateway_log']['examples'])))}."]


def _request_line(results: dict[str, Any]) -> str:
    failures, fault = results["failures"], results["fault"]
    back = (f"it did NOT come back: {fault['restart_failed'][-300:]}" if "restart_failed" in fault else
            f"it was healthy again at {fault.get('healthy_at', 0):.0f} s")
    finished = " and ".join(f"{n:g}" for n in fault.get("finished_before_kill", []))
    verdict = "yes" if results["verdicts"]["no_request_lost_but_the_killed_engines"] else "NO"
    return (f"{results['sent']} requests at {results['rate']:g}/s for {results['seconds'] / 60:g} min: "
            f"{results['answered']} answered as their kind should be; {results['killed_engine']} failed on the "
            f"killed engine ({_causes(failures['killed engine'])}), {results['lost']} lost "
            f"({_causes(failures['lost'])}). Engine 0 got SIGKILL at {fault.get('killed_at', 0):.0f} s while "
            f"serving {fault.get('serving_at_kill', 0):g} requests (running and waiting, by its /metrics just "
            f"before; {results['in_flight_at_kill']} in flight from clients in all), having finished {finished} "
            f"(engine 0 and 1) by then; {back}. **0 requests lost except those the killed engine was serving: "
            f"{verdict}.**")


def _causes(counts: dict[str, int]) -> str:
    return "; ".join(f"{cause}: {n}" for cause, n in sorted(counts.items())) or "none"


def _ingest_line(ingests: dict[str, Any]) -> str:
    fresh = sum(1 for run in ingests["runs"] if run["kind"] == "fresh")
    killed = len(ingests["runs"]) - fresh
    line = (f"Ingests while serving: {fresh} of fresh documents (the first before the start), {ingests['landed']} "
            f"landed (every document found by its own word at the end), {ingests['lost']} lost (reported success, "
            f"documents missing), {ingests['failed']} failed; {killed} killed with SIGKILL mid-way: "
            f"{ingests['killed_clean']} left nothing visible, {ingests['killed_visible']} left documents visible, "
            f"{ingests['killed_not_midway']} not caught mid-way. The store holds {ingests['records']} documents.")
    midway = [run["midway"] for run in ingests["runs"] if run["kind"] == "killed"]
    if midway:
        line += " At each kill: " + "; ".join(
            f"{m.get('written_at_kill', ['?', '?'])[0]} of {m.get('documents')} documents written, "
            f"published generation {'unchanged' if m.get('published_unchanged') else 'CHANGED'}" for m in midway) + "."
    return line + "".join(f"\n- {problem}" for problem in ingests["problems"])


def _after_line(after: dict[str, Any]) -> str:
    finished = [_causes({reason: int(n) for reason, n in counts.items()}) for counts in after["engines_finished"]]
    return (f"Afterwards: {after['gateway_in_flight']:g} requests in flight at the gateway, "
            f"{', '.join(f'{n:g}' for n in after['engines_running'])} running at the engines. Requests the engines "
            f"finished, by reason: engine 0 since its restart {finished[0]}; engine 1 {finished[1]}; tokens made for "
            f"requests that never finished (aborted when their clients left; the gateway counted "
            f"{int(after['gateway_statuses'].get('499', 0))} who left): "
            f"{', '.join(f'{n:g}' for n in after['engines_aborted_tokens'])}. Gateway replica "
            f"choices by reason: {_causes({k: int(v) for k, v in after['replica_choices'].items()})}; upstream "
            f"errors by kind: {_causes({k: int(v) for k, v in after['upstream_errors'].items()})}; retries: "
            f"{after['upstream_retries']:g}; retrievals that failed: {after['retrieval_failures']:g}; Redis calls that "
            f"failed (the in-process tier answered meanwhile): {after['shared_cache'].get('error', 0):g}.")


def _balance_line(results: dict[str, Any]) -> str:
    counts = results.get("last_quarter")
    if not counts:
        return "Engines' shares in the last quarter: not read."
    verdict = "yes" if results["verdicts"]["engines_within_25_percent_in_the_last_quarter"] else "NO"
    return (f"Requests each engine finished in the last quarter of the run (engine 0 restarted): "
            f"{' and '.join(f'{n:g}' for n in counts)}. **Within {BALANCE_TARGET:.0%} of each other: {verdict}.**")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (memory, files) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for role, readings in results["samples"].items():
        at = [r[0] / 60 for r in readings]
        memory.plot(at, [r[1] for r in readings], label=role)
        files.plot(at, [r[2] for r in readings], label=role)
    for axis in (memory, files):
        for key, style in (("killed_at", "--"), ("healthy_at", ":")):
            if key in results["fault"]:
                axis.axvline(results["fault"][key] / 60, color="grey", linestyle=style)
    memory.set_yscale("log")
    memory.set_ylabel("RSS (MB)")
    files.set_ylabel("open files")
    files.set_xlabel("minutes (dashed: engine 0 killed; dotted: healthy again)")
    memory.legend(fontsize=7, loc="lower right")
    figure.suptitle(f"prefixgate full soak: {results['rate']:g} requests/s, two workers, two engines")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def publish_full(out: Path, results: dict[str, Any], command: str) -> None:
    meta = {"date": date.today().isoformat(), "command": command, **results["versions"]}
    # without the bench extra a 20-minute run still leaves its numbers: publish skips the plot
    publish(out, "soak_full", meta, results, table(results, command), "RSS and open files of every process", plot)
