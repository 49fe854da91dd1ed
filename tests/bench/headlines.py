"""The headline table at the top of docs/benchmarks.md, read from the committed result files.

Each row is one section's headline: the figure, what it compares, its median and range over the runs
(or a label saying it is one run, or rounds pooled), the number of runs, the machine from the result
file's meta, and a link to the section. Nothing is measured here; run it after any bench that rewrites a
result file the table reads.

    python tests/bench/headlines.py [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.report import write_block  # noqa: E402


@dataclass(frozen=True)
class Row:
    figure: str
    compares: str
    value: str  # median [range], or the one run's figure and a label
    runs: str
    source: str  # the result file's stem
    section: str  # the heading it links to


def spread(values: Sequence[float], fmt: str, unit: str = "") -> str:
    """``median [min-max]`` of several runs' figures (``[min to max]`` where a sign would blur the dash)."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    dash = " to " if "+" in fmt or min(values) < 0 else "-"
    return f"{format(statistics.median(values), fmt)}{unit} [{low}{dash}{high}]"


def several(values: Sequence[float], fmt: str, unit: str = "", one: str = "one run") -> str:
    """``spread`` over several runs' figures; where the file holds one run, its figure and ``(one)``."""
    return f"{format(values[0], fmt)}{unit} ({one})" if len(values) == 1 else spread(values, fmt, unit)


def count(number: int, noun: str) -> str:
    """``1 pass``, ``3 passes``: how many runs a result file records."""
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"{number} {noun if number == 1 else plural}"


def summary(figure: dict[str, float], fmt: str, unit: str = "", scale: float = 1.0) -> str:
    """A result file's own ``{median, min, max}``."""
    return spread([figure["median"] * scale, figure["min"] * scale, figure["max"] * scale], fmt, unit)


def load(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "docs" / f"{name}.json").read_text())


def machine_of(meta: dict[str, Any]) -> str:
    """The machine as the result file's meta names it, without the OS, Python and package versions."""
    where = meta.get("where") or meta.get("machine") or "not recorded"
    return re.split(r" \(|, | shared by", where, maxsplit=1)[0]


def slug(heading: str) -> str:
    """The anchor GitHub gives a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


# ---- one function per row group: each reads its result file ---------------------------------------------------


def overhead() -> list[Row]:
    runs = load("overhead")["results"]
    rows = []
    for cell in runs["open_loop"]:
        if cell["phase"] == "paced 20 ms" and cell["concurrency"] == 64:
            gaps = [r["aiohttp"][0]["p50_ms"] - r["direct"][0]["p50_ms"] for r in cell["rounds"]]
            mode = "stream" if cell["stream"] else "JSON"
            rows.append(Row(f"Latency prefixgate adds, {mode}, p50 (c=64, 20 ms per token, open loop)",
                            "through prefixgate against straight to the upstream, same arrivals",
                            spread(gaps, "+.2f", " ms"), f"{len(gaps)} rounds", "overhead", "Proxy overhead"))
    for cell in runs["closed_loop"]:
        if cell["phase"] == "max-rps" and not cell["stream"]:
            # run once its row holds "results"; with a baseline, "rounds" (overhead.py)
            measured = cell.get("rounds") or [cell["results"]]
            through, direct = ([m[side][0]["requests"] / m[side][0]["seconds"] for m in measured]
                               for side in ("aiohttp", "direct"))
            value = (f"{through[0]:,.0f} against {direct[0]:,.0f} (one run)" if len(measured) == 1
                     else f"{spread(through, ',.0f')} against {spread(direct, ',.0f')}")
            rows.append(Row("Requests/s one gateway worker relays (JSON, upstream answers at once)",
                            "through prefixgate against straight to the upstream", value,
                            count(len(measured), "run"), "overhead", "Proxy overhead"))
    return rows


def prefix_reuse() -> list[Row]:
    rows = []
    for name in ("prefix_reuse", "prefix_reuse_gpu"):
        run = load(name)
        results = run["results"]
        cells = {(r["workload"][0], r["variant"], r["via"]): r for r in results}
        if all("runs" in cell for cell in results):  # per-round figures: ratios within each round
            hits = {w: [d["hit_rate"] / s["hit_rate"] for s, d in zip(cells[(w, "static", "direct")]["runs"],
                                                                       cells[(w, "dynamic", "prefixgate")]["runs"],
                                                                       strict=True)] for w in "ab"}
            ttft = {w: [d["ttft_mean_ms"] / s["ttft_mean_ms"]
                        for s, d in zip(cells[(w, "static", "prefixgate")]["runs"],
                                        cells[(w, "dynamic", "prefixgate")]["runs"], strict=True)] for w in "ab"}
            rounds = f"{len(hits['a'])} rounds"
            rows.append(Row("Prefix-cache hit rate of prompts with a new timestamp or ID each request (CPU engine)",
                            "through prefixgate against the same prompts never changing, sent directly",
                            f"(a) {spread(hits['a'], '.3f')}, (b) {spread(hits['b'], '.3f')}", rounds, name,
                            "Prefix reuse on a real engine"))
            rows.append(Row("TTFT of those prompts (CPU engine)",
                            "against the never-changing prompts, both through prefixgate (target within 5 %)",
                            f"(a) {spread(ttft['a'], '.2f', 'x')}, (b) {spread(ttft['b'], '.2f', 'x')}", rounds,
                            name, "Prefix reuse on a real engine"))
        else:
            ratio = {w: cells[(w, "dynamic", "prefixgate")]["hit_rate"] / cells[(w, "static", "direct")]["hit_rate"]
                     for w in "ab"}
            rows.append(Row("Prefix-cache hit rate of prompts with a new timestamp or ID each request (GPU engine)",
                            "through prefixgate against the same prompts never changing, sent directly",
                            f"(a) {ratio['a']:.3f}, (b) {ratio['b']:.3f} (rounds pooled, no range)",
                            f"{count(run['meta']['rounds'], 'round')} pooled", name,
                            "The same benchmark on a GPU engine"))
    return rows


def retrieval() -> list[Row]:
    results = load("retrieval")["results"]
    first = [cell["batch 32, concurrency 1"]["p50"] for cell in results["path"]["this tree"]]
    base = next(name for name in results["path"] if name.startswith("baseline"))
    old = [cell["batch 32, concurrency 1"]["p50"] for cell in results["path"][base]]
    gain = results["new_over_baseline"]["batch 32, concurrency 32"]
    tiers = load("retrieval_tiers")["results"]["summary"]
    quality = load("retrieval_quality")["results"]
    best, dense = quality["rrf 1:0.1 | boilerplate removed"], quality["dense | whole pages"]
    scale = load("store_scale")["results"]["100000/prefixgate"]
    quality_runs = len(load("retrieval_quality")["meta"]["runs"])
    return [
        Row("A first ask: embed, search, select, p50", f"against the store and embedder before ({base})",
            f"{spread(first, '.1f', ' ms')} against {statistics.median(old):.1f} ms", f"{len(first)} rounds",
            "retrieval", "Retrieval path"),
        Row("Questions/s with micro-batching at concurrency 32", f"this tree against {base}",
            spread(gain, ".2f", "x"), f"{len(gain)} rounds", "retrieval", "Retrieval path"),
        Row("A repeated question from Redis, p50 (shared passage cache)", "the in-process tier: "
            f"{summary(tiers['in_process']['p50_ms'], '.3f', ' ms')}", summary(tiers["redis"]["p50_ms"], ".3f", " ms"),
            f"{load('retrieval_tiers')['meta']['runs']} runs", "retrieval_tiers", "Retrieval path"),
        Row("Retrieval recall@3, hybrid (BM25 at 0.1), boilerplate left out",
            f"dense search over whole pages: {dense['all']['recall@3']:.3f}",
            f"{best['all']['recall@3']:.3f} [{best['r3_range'][0]:.3f}-{best['r3_range'][1]:.3f}]",
            f"{quality_runs} runs", "retrieval_quality", "Retrieval quality: boilerplate, dense, BM25 and hybrid"),
        Row("Embedded store search at 100k chunks, p50 / p99", "(target p99 <= 2 ms)",
            f"{summary(scale['p50_ms'], '.2f', ' ms')} / {summary(scale['p99_ms'], '.2f', ' ms')}",
            f"{load('store_scale')['meta']['runs']} runs", "store_scale", "The embedded vector store at scale"),
    ]


def routing() -> list[Row]:
    rows = []
    for name, caches in (("routing", "caches that hold every prompt"), ("routing_constrained", "160 KV blocks each")):
        affinity = load(name)["results"]["affinity"]
        single = affinity["single engine"]["runs"]
        ours = affinity["prefixgate"]["runs"]
        ratio = [o["hit_rate"] / s["hit_rate"] for o, s in zip(ours, single, strict=True)]
        rows.append(Row(f"Prefix-affinity hit rate over 4 CPU engines, {caches}", "against one engine alone",
                        spread(ratio, ".2f", "x"), f"{len(ratio)} passes", name,
                        "Routing and admission on real engines"))
    over = load("routing")["results"]["overload"]
    loaded = over["cases"]["prefixgate, 3x capacity"]["runs"]
    rows.append(Row("Admitted TTFT p99 at 3x an engine's capacity", "against 0.3x capacity (target <= 2x)",
                    spread(over["ratios"], ".2f", "x"), f"{len(over['ratios'])} passes", "routing",
                    "Routing and admission on real engines"))
    shed = [run["shed_p99_ms"] for run in loaded if run["shed_p99_ms"] is not None]  # null: the pass shed nothing
    shed_passes = (count(len(shed), "pass") if len(shed) == len(loaded)
                   else f"{len(shed)} of {count(len(loaded), 'pass')}")
    rows.append(Row("A shed request's answer, p99", "(target <= 5 ms)", spread(shed, ".1f", " ms"), shed_passes,
                    "routing", "Routing and admission on real engines"))
    for name in ("routing_slots", "routing_slots_confirm"):
        ratios = load(name)["results"]["length"]["7"]["ratios"]
        rows.append(Row("Short answers' TTFT p95 at 7 arrivals/s, short and long pools (known lengths)",
                        "one pool of both engines (2 batch slots each)", spread(ratios, ".2f", "x") + " better",
                        f"{len(ratios)} passes", name, "Routing and admission on real engines"))
    return rows


def length() -> list[Row]:
    prediction = load("length_prediction")["results"]["overall"]
    seeds = len(load("length_prediction")["meta"]["runs"])
    routed = load("length_routing")["results"]
    congested = routed["congested_rate"]
    targets = routed["rates"][congested]["targets"]
    kept = {name: targets[name]["gain_kept"] for name in ("predicted split", "start short, continue long")}
    return [
        Row("Short-answer prediction: precision / recall", "(targets >= 95 % / >= 90 %)",
            f"{summary(prediction['precision'], '.1f', ' %', 100)} / {summary(prediction['recall'], '.1f', ' %', 100)}",
            f"{seeds} seeded workloads", "length_prediction", "Length prediction without the client's help"),
        Row(f"Share of the oracle split's short-answer TTFT p95 gain kept, {congested} arrivals/s",
            "split by prediction; start short, continue long (target >= 0.80)",
            f"{summary(kept['predicted split'], '.2f')}; {summary(kept['start short, continue long'], '.2f')}",
            f"{kept['predicted split']['passes']} passes", "length_routing",
            "Length routing with prediction, and start short / continue long, on real engines"),
        decided(),
    ]


def decided() -> Row:
    """Apps decided by their own answers, at the rate where one pool congests in every pass: the split on the
    defaults against one pool and the oracle, short answers' TTFT p95."""
    name = "length_routing_decisive_congested"
    routed = load(name)["results"]
    rate = routed["congested_rate"]
    block = routed["rates"][rate]
    rows, kept = block["layouts"], block["targets"]["predicted split"]["gain_kept"]
    p95 = {layout: summary(rows[layout]["short_ttft_p95_ms"], ".0f", " ms")
           for layout in ("predicted split", "one pool", "oracle split")}
    return Row(f"Short answers' TTFT p95, apps whose answers never straddle the threshold, {rate} arrivals/s",
               "the split on the defaults (`history`); one pool; the oracle split",
               f"{p95['predicted split']}; {p95['one pool']}; {p95['oracle split']} (oracle's gain kept "
               f"{summary(kept, '.2f')}, target >= 0.80)", f"{block['passes']} passes", name,
               "Templates decided by their answers, on real engines")


def kv_events() -> list[Row]:
    def ratio(name: str, case: str, base: str) -> list[float]:
        affinity = load(name)["results"]["affinity"]
        return [c["hit_rate"] / b["hit_rate"] for c, b in zip(affinity[case]["runs"], affinity[base]["runs"],
                                                               strict=True)]

    small = ratio("routing_kv_constrained", "prefixgate, KV events", "prefixgate")
    ample = ratio("routing_kv", "prefixgate, KV events", "single engine")
    gpu = ratio("routing_kv_gpu_medians", "prefixgate, KV events", "single engine")
    cost = load("kv_lookup_cost")["results"]["summary"]
    return [
        Row("Hit rate routing by KV events, 160 KV blocks per engine (CPU)", "against the ring (balance: prefix)",
            spread(small, ".2f", "x"), f"{len(small)} passes", "routing_kv_constrained", "Hit rate on real engines"),
        Row("Hit rate routing by KV events, caches that hold every prompt (CPU)", "against one engine alone",
            spread(ample, ".3f"), f"{len(ample)} passes", "routing_kv", "Hit rate on real engines"),
        Row("Hit rate routing by KV events, caches that hold every prompt (GPU)",
            "against one engine alone", several(gpu, ".3f", one="one pass"), count(len(gpu), "pass"),
            "routing_kv_gpu_medians", "On a GPU, three passes with the current defaults"),
        Row(f"Gateway time per request to render and match a {cost['tokens']['median']:,.0f}-token chat, p50",
            "(target <= 0.3 ms)",
            summary(cost["total_p50_us"], ".0f", " µs"), f"{len(load('kv_lookup_cost')['results']['runs'])} runs",
            "kv_lookup_cost", "What it costs the gateway"),
    ]


def the_rest() -> list[Row]:
    speed = load("embedding_speed")["results"]
    adopted, before = (speed[name]["ms_per_call"]["question x1"]
                       for name in ("onnx, 2 threads (adopted)", "torch, 2 threads (before)"))
    tools = {(r["traffic"], r["gateway"]): r["runs"] for r in load("tool_order")["results"]}
    sorted_gain = [s["hit_rate"] / d["hit_rate"] for s, d in zip(tools[("varying", "sort_tools")],
                                                                 tools[("varying", "default")], strict=True)]
    turns = {(r["instructions"], r["app"]): r["runs"] for r in load("responses_turns")["results"]}
    same = [r["hit_rate"] / c["hit_rate"] for r, c in zip(turns[("plain", "responses")], turns[("plain", "chat")],
                                                          strict=True)]
    cost = {r["mode"]: [resp / chat for resp, chat in zip(r["responses"]["cpu_ms"], r["chat"]["cpu_ms"], strict=True)]
            for r in load("responses_overhead")["results"]}
    evidence = load("evidence_order")
    stable, score = ([cell["hit_rate"] for cell in evidence["results"]["cells"] if cell["order"] == order]
                     for order in ("stable", "score"))  # one cell per order and run, its rounds pooled
    pooled = count(evidence["meta"]["rounds"], "round")
    evidence_value = (f"{stable[0]:.3f} against {score[0]:.3f} (one run, {pooled} pooled)" if len(stable) == 1
                      else f"{spread(stable, '.3f')} against {statistics.median(score):.3f} ({pooled} pooled a run)")
    return [
        Row("Embedding one question (MiniLM, onnxruntime)", f"torch before: {summary(before, '.1f', ' ms')}",
            summary(adopted, ".1f", " ms"), f"{len(adopted['rounds'])} rounds", "embedding_speed",
            "Question embedding speed"),
        Row("Engine hit rate, tools in a new order each request, prompt.sort_tools on", "tools passed as sent",
            spread(sorted_gain, ".2f", "x"), f"{len(sorted_gain)} rounds", "tool_order",
            "Tool order: what keeping the app's order costs"),
        Row("Second turn's hit rate, Responses API (previous_response_id)", "a chat app resending every message",
            spread(same, ".2f", "x"), f"{len(same)} rounds", "responses_turns",
            "Responses API: the second turn of a conversation"),
        Row("Gateway CPU per Responses request: JSON / stream", "a chat request, same load",
            f"{spread(cost['json'], '.2f', 'x')} / {spread(cost['stream'], '.2f', 'x')}",
            f"{len(cost['json'])} rounds", "responses_overhead", "Responses API: gateway CPU per request"),
        Row("Hit rate with retrieved passages in stable order", "best-first score order",
            evidence_value, count(len(stable), "run"), "evidence_order",
            "Evidence order and the engine's prefix cache"),
    ]


def _per_round(results: list[dict[str, Any]], way: str, first_turn: bool, figure: str,
               agent: str = "claude_code") -> list[float]:
    """Per round of an agent replay: the median TTFT (ms), or the hit rate, of one agent's new sessions' first turns
    or later turns, for one way."""
    rounds = sorted({r["round"] for r in results})
    values = []
    for number in rounds:
        rows = [r for r in results if r["round"] == number and r["way"] == way and r["agent"] == agent
                and "error" not in r
                and ((r["turn"] == 1 and r["session"] > 1) if first_turn else r["turn"] > 1)]
        if figure == "ttft":
            values.append(1000 * statistics.median(r["ttft_s"] for r in rows))
        else:
            values.append(sum(r["cached_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows))
    return values


def agents() -> list[Row]:
    results = load("agent_replay_cpu_merged")["results"]
    direct, through = (_per_round(results, way, True, "ttft") for way in ("direct", "prefixgate"))
    faster = [d / t for d, t in zip(direct, through, strict=True)]
    of_ceiling = [t / c for t, c in zip(*(_per_round(results, way, True, "hit") for way in ("prefixgate", "ceiling")),
                                        strict=True)]
    later = [t / c for t, c in zip(*(_per_round(results, way, False, "hit") for way in ("prefixgate", "ceiling")),
                                   strict=True)]
    later_ttft = [t / c for t, c in zip(*(_per_round(results, way, False, "ttft") for way in ("prefixgate", "ceiling")),
                                        strict=True)]
    cost = {r["mode"]: r["agent"]["cpu_ms"] for r in load("agent_overhead")["results"]}
    section = "Coding agents: captured sessions replayed"
    return [
        Row("Claude Code, a new session's first-turn TTFT through prefixgate (Qwen-shaped template)",
            "straight to vLLM", spread(faster, ".1f", "x less"), f"{len(faster)} rounds", "agent_replay_cpu_merged",
            section),
        Row("Claude Code, hit rate through prefixgate: new sessions' first turns / later turns",
            "volatile bytes removed by hand", f"{spread(of_ceiling, '.3f', 'x')} / {spread(later, '.3f', 'x')}",
            f"{len(later)} rounds", "agent_replay_cpu_merged", section),
        Row("Claude Code, later turns' TTFT through prefixgate (Qwen-shaped template)",
            "volatile bytes removed by hand (target <= 1.10x)", spread(later_ttft, ".2f", "x"),
            f"{len(later_ttft)} rounds", "agent_replay_cpu_merged", section),
        Row("Gateway CPU per Claude Code request (51 KB): JSON / stream", "the 1 ms aimed at",
            f"{spread(cost['json'], '.2f', ' ms')} / {spread(cost['stream'], '.2f', ' ms')}",
            f"{len(cost['json'])} rounds", "agent_overhead", "What an agent's request costs the gateway"),
    ]


GROUPS: tuple[Callable[[], list[Row]], ...] = (overhead, prefix_reuse, retrieval, routing, length, kv_events,
                                               the_rest, agents)


def table(text: str) -> str:
    headings = {match.group(1).strip() for match in re.finditer(r"^#{2,3} (.+)$", text, re.M)}
    lines = ["Each figure is the median over its runs with the range in brackets, unless it says one run (or "
             "rounds pooled); ratios are taken within each run, then their median. Machines as each result file "
             "records them; commands and full tables are in the linked sections. Written by "
             "`python tests/bench/headlines.py` from the result files.", "",
             "| figure | compared with | median [range] | runs | machine | result file | section |",
             "|---|---|---|---|---|---|---|"]
    for group in GROUPS:
        for row in group():
            if row.section not in headings:
                raise SystemExit(f"no section '{row.section}' in docs/benchmarks.md")
            meta = load(row.source)["meta"]
            lines.append(f"| {row.figure} | {row.compares} | {row.value} | {row.runs} | {machine_of(meta)}, "
                         f"{meta['date']} | `docs/{row.source}.json` | [{row.section}](#{slug(row.section)}) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    out = Path(args.out)
    block = table(out.read_text())
    write_block(out, "headlines", block)
    print(block)


if __name__ == "__main__":
    main()
