"""Claude Code sessions across two vLLM CPU engines behind prefixgate: where each balance mode sends them, what the
engines' prefix caches make of it.

Every Claude Code session opens with the same long system prompt and tools (about 78 % of a first turn's tokens),
then its own first user turn; each later turn resends the whole conversation. The workload is ``--sessions``
sessions built from the captured ones (``agent_sessions/claude_code.jsonl.gz``: 3 sessions of 5 turns): session n
replays captured session n mod 3 under a fresh session id (in ``X-Claude-Code-Session-Id`` and ``metadata.user_id``,
as the CLI sends it) and with a first user prompt of its own (``Ticket NN: ...``), so the system prompt and tools
stay byte-identical across sessions and everything after them is the session's. Sessions start ``--stagger``
seconds apart and run concurrently; each sends its turns in order, turn k+1 once turn k's answer ended, asking for
4 streamed tokens, through prefixgate's ``/v1/messages`` with an ``x-api-key``.

Arms, on the same two engines (prefix caches reset before each arm, a fresh gateway each time, and each engine
serving a few short chats once the gateway is up, so both have reported their KV events to it: ``run_arm``):

- ``prefix``: ``balance: prefix`` with the session header and ``metadata`` taken out: the ring keys every request
  on its prompt's first characters, which all sessions share;
- ``kv_events``: ``balance: kv_events``, sessions named as the CLI names them (kept, as every Claude Code request
  carries them; this mode reads them for a prompt no engine holds, and between engines holding it alike): the
  replica holding the most of the prompt's leading blocks first;
- ``session``: ``balance: prefix``, sessions named as the CLI names them: the ring keys each request on its session;
- ``kv_events_wide``: ``kv_events`` with ``max_chars`` past a session's first turn, so that its match reaches each
  session's own tokens.

Per arm: requests per engine (spread: max/mean), the engines' prefix-cache hit rate (each engine's own
``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` deltas, in tokens), first and later turns' hit rate (the
answers' ``usage``: ``cache_read_input_tokens`` over it plus ``input_tokens``), the sessions that changed engines
between turns (each request's replica from the gateway's access log), TTFT p50/p95 and the time until the last
session ended. ``--passes`` passes, arms interleaved (their order rotating), each pass under fresh session ids.

    .venv/bin/python tests/bench/session_routing.py --passes 3 --publish
    .venv/bin/python tests/bench/session_routing.py --render bench-out/session_routing.json   # docs again
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.routing.replica import ReplicaReason  # noqa: E402
from proxy.engine.tiny_model import MODEL_VERSION  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.agent_replay import OUTPUT_TOKENS, SESSIONS  # noqa: E402
from tests.bench.open_loop import percentile  # noqa: E402
from tests.bench.processes import start_engine, start_gateway, stop_gateway  # noqa: E402
from tests.bench.report import command_line, portable, write_block  # noqa: E402
from tests.bench.routing import MODEL, engine_args, reset_caches, warm_up  # noqa: E402
from tests.support.metrics_text import sample_sum  # noqa: E402

WIDE_CHARS = 131_072


@dataclass(frozen=True)
class Arm:
    """How an arm's gateway balances and what its requests carry."""

    label: str  # the table's
    balance: str
    named: bool  # sessions named as the CLI names them (else ``anonymous``)
    max_chars: int | None = None  # kv_events.max_chars (None: the default, 32,768)


ARMS = {
    "prefix": Arm("`prefix`, no session named", "prefix", named=False),
    "kv_events": Arm("`kv_events`, sessions named", "kv_events", named=True),
    "session": Arm("`prefix`, sessions named", "prefix", named=True),
    # kv_events matching far enough to read each session's own blocks: the default 32,768 characters end inside the
    # shared system prompt and tools (each session's own tokens start near character 40,000)
    "kv_events_wide": Arm(f"`kv_events`, `max_chars: {WIDE_CHARS}`, sessions named", "kv_events", named=True,
                          max_chars=WIDE_CHARS),
}
KEY = "sk-bench-agents"
ADMIN_KEY = "sk-bench-admin"  # reads the gateway's /metrics: why it chose each replica
SESSION_HEADER = "x-claude-code-session-id"
TICKET = re.compile(r"Ticket (\d+): ")
# The captured requests' transport and SDK headers are kept; these are the gateway's business, or the session's.
DROPPED_HEADERS = {"content-length", "host", "authorization", "x-api-key"}
TOOL_ARGS = ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]  # as agent_replay's engine: tools taken


@dataclass
class Session:
    """One replayed session: its turns in the order the CLI sent them."""

    number: int
    turns: list[tuple[dict[str, Any], dict[str, str]]]  # body and headers, as the CLI would send them


# ---- the workload ---------------------------------------------------------------------------------

def _renamed(value: Any, old: str, new: str) -> Any:
    """``value`` with the captured session id replaced everywhere (headers, ``metadata.user_id``'s JSON)."""
    return json.loads(json.dumps(value).replace(old, new))


def _own_first_prompt(body: dict[str, Any], number: int) -> dict[str, Any]:
    """The body with the session's first user prompt (the last text part of the first user message, resent on every
    turn) marked ``Ticket NN:``: each session's own tokens start there, after the shared system prompt and tools."""
    messages = [dict(message) for message in body["messages"]]
    first = next(index for index, message in enumerate(messages) if message["role"] == "user")
    content = messages[first]["content"]
    if isinstance(content, str):
        messages[first]["content"] = f"Ticket {number:02d}: {content}"
    else:
        parts = [dict(part) for part in content]
        last = max(index for index, part in enumerate(parts) if part.get("type") == "text")
        parts[last]["text"] = f"Ticket {number:02d}: {parts[last]['text']}"
        messages[first]["content"] = parts
    return {**body, "messages": messages}


def workload(count: int, seed: str) -> list[Session]:
    """``count`` sessions from the captured Claude Code ones (session n replays captured session n mod 3), each
    under a session id of its own (uuid5 of ``seed`` and n: fresh per pass, the same on every run) and with its own
    first prompt; each turn asks for a few streamed tokens of the served model."""
    with gzip.open(SESSIONS["claude_code"], "rt") as lines:
        captured = [json.loads(line) for line in lines]
    by_session: dict[int, list[dict[str, Any]]] = {}
    for row in sorted(captured, key=lambda row: (row["session"], row["turn"])):
        by_session.setdefault(row["session"], []).append(row)
    originals = list(by_session.values())
    sessions = []
    for number in range(1, count + 1):
        rows = originals[(number - 1) % len(originals)]
        old = rows[0]["headers"][SESSION_HEADER]
        new = str(uuid.uuid5(uuid.NAMESPACE_URL, f"prefixgate-bench/{seed}/{number}"))
        turns = []
        for row in rows:
            body = _own_first_prompt(_renamed(row["body"], old, new), number)
            body |= {"model": MODEL, "max_tokens": OUTPUT_TOKENS, "stream": True}
            headers = {name: value for name, value in _renamed(row["headers"], old, new).items()
                       if name.lower() not in DROPPED_HEADERS}
            turns.append((body, headers | {"x-api-key": KEY}))
        sessions.append(Session(number, turns))
    return sessions


def anonymous(body: dict[str, Any], headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The request without the session it names (no session header, no ``metadata``): what a client that names
    none sends, which the ring keys on the prompt's first characters."""
    return ({key: value for key, value in body.items() if key != "metadata"},
            {name: value for name, value in headers.items() if name.lower() != SESSION_HEADER})


# ---- sending --------------------------------------------------------------------------------------

async def _turn(client: aiohttp.ClientSession, url: str, body: dict[str, Any],
                headers: dict[str, str]) -> dict[str, Any]:
    """One streamed Messages request: seconds to its first delta event, and its usage as the engine counted it
    (``input_tokens`` counts the uncached prompt tokens only, ``cache_read_input_tokens`` the cached ones)."""
    started = time.perf_counter()
    first, usage = None, {}
    try:
        async with client.post(url, json=body, headers=headers) as answer:
            if answer.status != 200:
                return {"error": f"{answer.status} {(await answer.text())[:300]}"}
            async for raw in answer.content:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if first is None and line.startswith("event: ") and line.endswith("_delta"):
                    first = time.perf_counter() - started
                elif line.startswith("data: {") and '"usage"' in line:
                    data = json.loads(line[6:])
                    usage = {**usage, **(data.get("usage") or (data.get("message") or {}).get("usage") or {})}
    except (aiohttp.ClientError, TimeoutError) as error:
        return {"error": repr(error)}
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached + (usage.get("cache_creation_input_tokens") or 0)
    return {"ttft_s": first, "cached_tokens": cached, "prompt_tokens": prompt}


async def drive(origin: str, sessions: list[Session], arm: Arm,
                stagger: float) -> tuple[list[dict[str, Any]], float]:
    """Every session at once (session n starting ``stagger`` x n seconds in), each sending its turns in order; the
    requests' outcomes and the seconds until the last session ended. Sessions named as the CLI names them, or
    taken out (``anonymous``), as the ``arm`` says."""
    url = origin + "/v1/messages?beta=true"  # the CLI's path
    outcomes: list[dict[str, Any]] = []

    async def one(client: aiohttp.ClientSession, session: Session, delay: float) -> None:
        await asyncio.sleep(delay)
        for turn, (body, headers) in enumerate(session.turns, 1):
            if not arm.named:
                body, headers = anonymous(body, headers)
            outcomes.append({"session": session.number, "turn": turn, **await _turn(client, url, body, headers)})

    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as client:
        await asyncio.gather(*(one(client, session, index * stagger) for index, session in enumerate(sessions)))
    return outcomes, time.perf_counter() - started


# ---- reading the engines and the gateway ----------------------------------------------------------

def engine_counters(origins: list[str]) -> list[dict[str, float]]:
    """Each engine's prefix-cache hits and queries (tokens) and finished requests, from its own /metrics."""
    readings = []
    for origin in origins:
        text = httpx.get(origin + "/metrics", timeout=10).text
        readings.append({"hits": sample_sum(text, "vllm:prefix_cache_hits_total"),
                         "queries": sample_sum(text, "vllm:prefix_cache_queries_total"),
                         "requests": sample_sum(text, "vllm:request_success_total")})
    return readings


def replicas_taken(access_log: Path, origins: list[str]) -> dict[tuple[int, int], int]:
    """(session, turn) -> the engine that took it, from the gateway's access log (its lines carry the body as sent:
    the ticket names the session, the user turns count the turn)."""
    index_of = {origin + "/v1": index for index, origin in enumerate(origins)}
    taken = {}
    for line in access_log.read_text().splitlines():
        entry = json.loads(line)
        body = entry.get("body")
        if not isinstance(body, dict) or entry.get("replica") not in index_of:
            continue
        found = TICKET.search(json.dumps(body["messages"][:1]))
        if found is not None:
            turn = sum(1 for message in body["messages"] if message.get("role") == "user")
            taken[int(found.group(1)), turn] = index_of[entry["replica"]]
    return taken


def choice_reasons(origin: str) -> dict[str, float]:
    """The gateway's replica choices by reason (``ReplicaReason``: held, placed, home, warm, spilled...)."""
    text = httpx.get(origin + "/metrics", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10).text
    counts = {reason.value: sample_sum(text, "prefixgate_replica_choices_total", reason=reason.value)
              for reason in ReplicaReason}
    return {reason: count for reason, count in counts.items() if count}


def gateway_config(arm: Arm, origins: list[str], tokenizer: str, access_log: Path) -> dict[str, Any]:
    """One pool of the two engines, balanced as ``arm`` says, everything else on its defaults; the access log with
    the bodies sent, so each request's engine can be told."""
    pool: dict[str, Any] = {"name": "agents", "replicas": [origin + "/v1" for origin in origins], "models": [MODEL],
                            "balance": arm.balance}
    if arm.balance == "kv_events":
        pool["kv_events"] = {"tokenizer": tokenizer, **({"max_chars": arm.max_chars} if arm.max_chars else {})}
    return {"pools": [pool], "auth": {"keys": [{"tenant": "agents", "key": KEY}], "admin_key": ADMIN_KEY},
            "access_log": {"enabled": True, "path": str(access_log), "prompts": True}}


# ---- one arm ----------------------------------------------------------------------------------------

def _spread(counts: list[float]) -> float:
    """max / mean: 1.0 is an even split, 2.0 all on one of two engines."""
    mean = statistics.fmean(counts)
    return max(counts) / mean if mean else 0.0


def _hit_rate(rows: list[dict[str, Any]]) -> float | None:
    """Cached prompt tokens over prompt tokens, as the answers counted them: the engine's count per request, which
    its /metrics cannot split by turn."""
    prompt = sum(row["prompt_tokens"] for row in rows)
    return sum(row["cached_tokens"] for row in rows) / prompt if prompt else None


def moves(taken: dict[tuple[int, int], int]) -> tuple[int, int]:
    """Sessions that changed engines between turns at least once, and the changes in all."""
    by_session: dict[int, list[int]] = {}
    for (session, _turn), engine in sorted(taken.items()):
        by_session.setdefault(session, []).append(engine)
    changes = [sum(a != b for a, b in itertools.pairwise(engines)) for engines in by_session.values()]
    return sum(1 for count in changes if count), sum(changes)


def run_arm(arm: str, origins: list[str], tokenizer: str, sessions: list[Session], workdir: Path,
            stagger: float, prime: bool) -> dict[str, Any]:
    """One arm from empty prefix caches and a fresh gateway: the figures of ``figures``, and why the gateway chose
    each replica. ``prime``: once the gateway is up, each engine serves a few short chats sent to it directly, so
    both have published KV events the gateway received (engines already serving, as in production); without it an
    engine that has stored nothing since the gateway started has told it nothing."""
    reset_caches(origins)
    access_log = workdir / f"access-{arm}.jsonl"
    access_log.unlink(missing_ok=True)
    process, origin = start_gateway(gateway_config(ARMS[arm], origins, tokenizer, access_log), workdir,
                                    f"gateway-{arm}")
    try:
        time.sleep(2)  # the feeds subscribe to the engines' events (a SUB socket sees only what comes after)
        if prime:
            warm_up(origins, MODEL)
            time.sleep(1)  # their events reach the gateway
        before = engine_counters(origins)
        outcomes, wall = asyncio.run(drive(origin, sessions, ARMS[arm], stagger))
        after = engine_counters(origins)
        reasons = choice_reasons(origin)
    finally:
        stop_gateway(process)
    return {**figures(outcomes, wall, before, after, replicas_taken(access_log, origins)), "choices": reasons}


def figures(outcomes: list[dict[str, Any]], wall: float, before: list[dict[str, float]],
            after: list[dict[str, float]], taken: dict[tuple[int, int], int]) -> dict[str, Any]:
    """An arm's pass in numbers: the engines' own counts (requests, hits over queries) and the answers' (hit rate
    by turn, TTFT), and the sessions that moved."""
    delta = [{key: later[key] - earlier[key] for key in later} for earlier, later in zip(before, after, strict=True)]
    served = [engine["requests"] for engine in delta]
    prefilled = [engine["queries"] - engine["hits"] for engine in delta]
    good = [row for row in outcomes if "error" not in row]
    ttfts = [row["ttft_s"] * 1000 for row in good if row["ttft_s"] is not None]
    later = [row["ttft_s"] * 1000 for row in good if row["ttft_s"] is not None and row["turn"] > 1]
    moved, changes = moves(taken)
    return {
        "requests_per_engine": served, "requests_max_over_mean": _spread(served),
        "prefilled_tokens_per_engine": prefilled, "prefilled_max_over_mean": _spread(prefilled),
        "hit_rate": sum(e["hits"] for e in delta) / max(sum(e["queries"] for e in delta), 1),
        "first_turn_hit_rate": _hit_rate([row for row in good if row["turn"] == 1]),
        "later_turns_hit_rate": _hit_rate([row for row in good if row["turn"] > 1]),
        "sessions_moved": moved, "engine_changes": changes, "requests_placed": len(taken),
        "ttft_p50_ms": percentile(ttfts, 0.5) if ttfts else None,
        "ttft_p95_ms": percentile(ttfts, 0.95) if ttfts else None,
        "later_turns_ttft_p50_ms": percentile(later, 0.5) if later else None,
        "wall_s": wall, "errors": len(outcomes) - len(good),
        "error_samples": [row["error"] for row in outcomes if "error" in row][:3],
        "engine_of": {f"{session}/{turn}": engine for (session, turn), engine in sorted(taken.items())},
    }


# ---- the run ------------------------------------------------------------------------------------------

HEADLINE = ("requests_max_over_mean", "prefilled_max_over_mean", "prefilled_tokens", "hit_rate", "first_turn_hit_rate",
            "later_turns_hit_rate", "sessions_moved", "engine_changes", "ttft_p50_ms", "ttft_p95_ms",
            "later_turns_ttft_p50_ms", "wall_s")


def _figure(run: dict[str, Any], name: str) -> float | None:
    """A pass's figure; ``prefilled_tokens`` (the prompt tokens the engines computed, all engines together: the
    work the routing left them) from the per-engine counts, so a result file needs no new field for it."""
    if name == "prefilled_tokens":
        return sum(run["prefilled_tokens_per_engine"])
    return run[name]


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per arm and figure: the median over passes and the range (``--render`` makes it again from the passes)."""
    table: dict[str, Any] = {}
    for arm, passes in runs.items():
        table[arm] = {}
        for name in HEADLINE:
            values = [value for run in passes if (value := _figure(run, name)) is not None]
            if values:
                table[arm][name] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        table[arm]["errors"] = sum(run["errors"] for run in passes)
    return table


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Two engines (each bound to a core of its own, both publishing KV events, which only the kv_events arms'
    gateways read), the arms ``--passes`` times, interleaved; the result with its caption."""
    workdir = Path(tempfile.mkdtemp(prefix="session-routing-"))
    cores = sorted(os.sched_getaffinity(0))
    settings = SimpleNamespace(max_num_seqs=args.max_num_seqs, kv_blocks=args.kv_blocks, kv_events=True)
    engines = [start_engine(MODEL, workdir, core=cores[(-1 - i) % len(cores)], name=f"engine{i}",
                            extra_args=[*TOOL_ARGS, *engine_args(settings)])  # each engine its own event sockets
               for i in range(2)]
    arms = [arm for arm in ARMS if arm in args.arms.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    try:
        for engine in engines:
            engine.wait_ready(300)
        origins = [engine.origin for engine in engines]
        warm_up(origins, MODEL)
        seen = {"where": machine.machine(), "vllm": machine.engine_version(origins[0]),
                "model": f"{MODEL} ({MODEL_VERSION}: random weights, the project's own tokenizer)"}
        for number in range(args.passes):
            sessions = workload(args.sessions, f"pass-{number}")
            for arm in arms[number % len(arms):] + arms[:number % len(arms)]:  # each pass starts with another arm
                runs[arm].append(run_arm(arm, origins, engines[0].model_dir, sessions, workdir, args.stagger,
                                         not args.cold_feeds))
                shown = {key: value for key, value in runs[arm][-1].items() if key != "engine_of"}
                print(f"pass {number + 1} {arm}", json.dumps(shown), flush=True)
    finally:
        for engine in engines:
            engine.stop()
    meta = {"date": date.today().isoformat(), **seen, "cores": len(cores), "engines": 2,
            "sessions": args.sessions, "turns_per_session": len(sessions[0].turns), "passes": args.passes,
            "stagger_s": args.stagger,
            "output_tokens": OUTPUT_TOKENS, "kv_blocks": args.kv_blocks, "max_num_seqs": args.max_num_seqs,
            "primed": not args.cold_feeds, "command": command_line("session_routing.py", sys.argv[1:],
                                                                   ("--out", "--publish"))}
    meta = portable(meta)
    return {"meta": meta, "summary": summary(runs), "runs": runs}


# ---- the report -----------------------------------------------------------------------------------



def table(result: dict[str, Any]) -> str:
    """Per arm, medians of the passes (range): the spread, the hit rates, the sessions moved, TTFT."""
    lines = ["| balance | requests per engine, max / mean | prefilled tokens, max / mean | "
             "tokens prefilled, all engines | engine hit rate | first turns' hit rate | later turns' hit rate | "
             "sessions that changed engine | TTFT p50 (ms) | TTFT p95 (ms) | all sessions done (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(figures: dict[str, Any], name: str, spec: str) -> str:
        figure = figures.get(name)
        if figure is None:
            return "-"
        if figure["min"] == figure["max"]:
            return format(figure["median"], spec)
        return f"{figure['median']:{spec}} ({figure['min']:{spec}}-{figure['max']:{spec}})"

    for arm, figures in result["summary"].items():
        lines.append(f"| {ARMS[arm].label} | {cell(figures, 'requests_max_over_mean', '.2f')} | "
                     f"{cell(figures, 'prefilled_max_over_mean', '.2f')} | "
                     f"{cell(figures, 'prefilled_tokens', ',.0f')} | {cell(figures, 'hit_rate', '.3f')} | "
                     f"{cell(figures, 'first_turn_hit_rate', '.3f')} | "
                     f"{cell(figures, 'later_turns_hit_rate', '.3f')} | "
                     f"{cell(figures, 'sessions_moved', '.0f')} of {result['meta']['sessions']} | "
                     f"{cell(figures, 'ttft_p50_ms', ',.0f')} | {cell(figures, 'ttft_p95_ms', ',.0f')} | "
                     f"{cell(figures, 'wall_s', '.0f')} |")
    return "\n".join(lines)


def caption(meta: dict[str, Any]) -> str:
    kv = f"{meta['kv_blocks']} KV blocks each" if meta["kv_blocks"] else "1 GiB of KV cache each (~1M tokens)"
    return (f"Run of {meta['date']} on {meta['where']}; {meta['vllm']}, {meta['model']}; 2 engines, each bound to a "
            f"core, {kv}; {meta['sessions']} sessions of {meta['turns_per_session']} turns, starting "
            f"{meta['stagger_s']:g} s apart, {meta['output_tokens']} output tokens a turn; {meta['passes']} passes, "
            f"median (range). `docs/session_routing.json`. Command: `{meta['command']}`.")


def publish(result: dict[str, Any]) -> None:
    """The result as docs/session_routing.json and its table in docs/benchmarks.md (block ``session_routing``)."""
    docs = ROOT / "docs"
    (docs / "session_routing.json").write_text(json.dumps(result, indent=1) + "\n")
    write_block(docs / "benchmarks.md", "session_routing", caption(result["meta"]) + "\n\n" + table(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--stagger", type=float, default=0.5, help="seconds between sessions' starts")
    parser.add_argument("--arms", default=",".join(ARMS), help="a comma list of arms (default: all)")
    parser.add_argument("--kv-blocks", type=int, default=0, help="KV cache blocks per engine (0: 1 GiB's worth)")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--cold-feeds", action="store_true",
                        help="no short chats to each engine once the gateway is up (see run_arm)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "session_routing.json")
    parser.add_argument("--publish", action="store_true", help="also write docs/session_routing.json and the table")
    parser.add_argument("--render", type=Path, metavar="JSON", help="only publish a result file again, no engines")
    args = parser.parse_args()
    if args.render:
        result = json.loads(args.render.read_text())
        result["summary"] = summary(result["runs"])
    else:
        result = measure(args)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(caption(result["meta"]) + "\n\n" + table(result))
    if args.publish or args.render:
        publish(result)


if __name__ == "__main__":
    main()
