"""Replay captured coding-agent sessions against a real engine four ways, and report per turn the engine's
prefix-cache hit rate and time to first token.

The sessions are Claude Code's and the Codex CLI's own requests (``agent_sessions/``, captured by
``agent_capture_sessions.sh``): 3 sessions of 5 turns each, on two dates, with a commit between sessions. Each
request is sent as:

- ``direct``: as the agent sent it, straight to the engine;
- ``prefixgate``: as prefixgate sends it to the engine, made by the gateway itself (``prepare`` runs each captured
  request through the app in memory and records the body its engine receives);
- ``prefixgate, git_status: strip``: the same, for a tenant whose prompt policy strips the git snapshot;
- ``ceiling``: every volatile byte removed by hand: the billing block, the date lines, the git snapshot, Codex's
  environment date.

Every request asks for a few streamed tokens (the conversation's later turns carry the agent's recorded answers,
not the replay's), and each way runs under a cache salt of its own, so the four share one engine without sharing
its cache. The hit rate is the engine's own count: ``cache_read_input_tokens`` (Messages) or ``cached_tokens``
(Responses) over the prompt's tokens, which vLLM reports with ``--enable-prompt-tokens-details``.

Steps, so the engine side needs nothing but Python's standard library (a lent GPU machine has no prefixgate):

    .venv/bin/python tests/bench/agent_replay.py prepare --out bench-out/agent_requests.jsonl.gz
    python3 tests/bench/agent_replay.py replay --requests bench-out/agent_requests.jsonl.gz \\
        --engine http://127.0.0.1:8000 --model m --rounds 3 --reset --out bench-out/agent_replay.json
    .venv/bin/python tests/bench/agent_replay.py publish bench-out/agent_replay.json --label cpu_merged

``cpu-replay`` does the second step on this machine's CPU: it starts the tiny model's vLLM engine itself (a
65,536-token context, with ``--template``: a chat template of the bench's own, else the model's), replays, and
stops it. ``tests/bench/gpu_agent_replay.sh`` does it on a lent GPU.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
SESSIONS = {"claude_code": HERE / "agent_sessions" / "claude_code.jsonl.gz",
            "codex": HERE / "agent_sessions" / "codex.jsonl.gz"}
WAYS = ("direct", "prefixgate", "prefixgate, git_status: strip", "ceiling")
# the tenant's prompt policy of each way through the gateway: its defaults, and a tenant that strips the git snapshot
GATEWAY_WAYS = {"prefixgate": {}, "prefixgate, git_status: strip": {"actions": {"git_status": "strip"}}}
OUTPUT_TOKENS = 4
_DATE_LINE = re.compile(r"^Today's date is [^\n]*\n?", re.MULTILINE)
_GIT_SNAPSHOT = re.compile(r"# gitStatus\n.*?(?=\n</system-reminder>|\Z)", re.DOTALL)
_CODEX_DATE = re.compile(r"\s*<current_date>[^<]*</current_date>")


def _captured(agent: str) -> list[dict[str, Any]]:
    with gzip.open(SESSIONS[agent], "rt") as lines:
        return [json.loads(line) for line in lines]


def _endpoint(path: str) -> str:
    return "/v1/messages" if path.startswith("/v1/messages") else "/v1/responses"


def _by_hand(body: dict[str, Any]) -> dict[str, Any]:
    """The ceiling: ``body`` with every volatile byte taken out by hand."""
    if isinstance(body.get("system"), list):
        body = {**body, "system": [block for block in body["system"]
                          if not str(block.get("text", "")).startswith("x-anthropic-billing-header")]}

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return _CODEX_DATE.sub("", _GIT_SNAPSHOT.sub("", _DATE_LINE.sub("", value)))
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        return value

    return clean(body)


def _through_gateway(rows: list[dict[str, Any]], data_dir: Path, prompt: dict[str, Any]) -> list[dict[str, Any]]:
    """The bodies prefixgate's engine receives for ``rows``, in order: the app run in memory, its tenant's prompt
    policy ``prompt`` (``{}``: the defaults)."""
    sys.path.insert(0, str(HERE.parents[1]))
    from tests.support.clock import FakeClock
    from tests.support.in_memory import in_memory_gateway
    from tests.support.mock_transport import MockReply, MockUpstreams

    sent: list[dict[str, Any]] = []

    def engine(url: str, body: bytes) -> MockReply:
        sent.append(json.loads(body))
        if url.endswith("/messages"):
            return MockReply.json({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
                                   "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}})
        return MockReply.json({"id": "resp_1", "object": "response", "status": "completed", "output": [],
                               "usage": {"input_tokens": 1, "output_tokens": 1}})

    models = sorted({row["body"]["model"] for row in rows})
    config = {"pools": [{"name": "engine", "replicas": ["http://engine:8000/v1"], "models": models,
                         "health": {"interval": 0}, "engine_metrics": {"interval": 0}}],
              "auth": {"keys": [{"tenant": "agents", "key": "sk-agents"}]},
              "tenants": {"agents": {"prompt": prompt}}}
    with in_memory_gateway(config, MockUpstreams(engine), FakeClock(), data_dir) as client:
        for row in rows:
            body = {**row["body"], "stream": False}
            answer = client.post(_endpoint(row["path"]), json=body, headers={"x-api-key": "sk-agents"})
            if answer.status_code != 200:
                raise SystemExit(f"prefixgate refused a captured request: {answer.status_code} {answer.text[:300]}")
    return sent


def prepare(out: Path, agents: list[str]) -> None:
    """Each captured request three ways, written as JSON lines: agent, session, turn, way, endpoint, body."""
    import tempfile

    written = 0
    with gzip.open(out, "wt") as lines, tempfile.TemporaryDirectory() as data_dir:
        for agent in agents:
            rows = _captured(agent)
            through = {way: _through_gateway(rows, Path(data_dir) / agent / str(n), prompt)
                       for n, (way, prompt) in enumerate(GATEWAY_WAYS.items())}
            for index, row in enumerate(rows):
                bodies = {"direct": row["body"], **{way: sent[index] for way, sent in through.items()},
                          "ceiling": _by_hand(row["body"])}
                for way, body in bodies.items():
                    lines.write(json.dumps({"agent": agent, "session": row["session"], "turn": row["turn"], "way": way,
                                            "endpoint": _endpoint(row["path"]), "body": body}) + "\n")
                    written += 1
    print(f"wrote {written} requests to {out}")


def _send(origin: str, endpoint: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One streamed request: seconds to the first generated token's event, and the prompt's tokens and cached ones."""
    parts = urlsplit(origin)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    started = time.perf_counter()
    connection.request("POST", endpoint, json.dumps(body), {"content-type": "application/json"})
    answer = connection.getresponse()
    if answer.status != 200:
        return {"error": f"{answer.status} {answer.read()[:300]!r}"}
    first = None
    usage: dict[str, Any] = {}
    for raw in answer:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if first is None and line.startswith("event: ") and line.endswith("delta"):
            first = time.perf_counter() - started
        if line.startswith("data: {") and '"usage"' in line:
            data = json.loads(line[6:])
            found = data.get("usage") or (data.get("response") or {}).get("usage") or \
                (data.get("message") or {}).get("usage")
            if found:
                usage = found
    connection.close()
    if "input_tokens_details" in usage:  # the Responses API
        prompt, cached = usage.get("input_tokens"), (usage.get("input_tokens_details") or {}).get("cached_tokens")
    else:  # Messages: input_tokens counts the uncached ones only
        cached = usage.get("cache_read_input_tokens") or 0
        prompt = (usage.get("input_tokens") or 0) + cached + (usage.get("cache_creation_input_tokens") or 0)
    return {"ttft_s": first, "prompt_tokens": prompt, "cached_tokens": cached}


def _for_engine(request: dict[str, Any], model: str, salt: str) -> dict[str, Any]:
    body = {**request["body"], "model": model, "stream": True, "cache_salt": salt}
    if request["endpoint"] == "/v1/messages":
        body["max_tokens"] = OUTPUT_TOKENS
    else:
        body["max_output_tokens"] = OUTPUT_TOKENS
    return body


def _reset_prefix_cache(origin: str, timeout: float) -> None:
    """vLLM's ``POST /reset_prefix_cache`` (served with ``VLLM_SERVER_DEV_MODE=1``)."""
    parts = urlsplit(origin)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    connection.request("POST", "/reset_prefix_cache")
    answer = connection.getresponse()
    answer.read()
    connection.close()
    if answer.status != 200:
        raise SystemExit(f"the engine did not reset its prefix cache: {answer.status}")


def replay(requests: Path, origin: str, model: str, rounds: int, agents: list[str], out: Path,
           timeout: float, reset: bool = False) -> None:
    """Each round: every way in turn, each agent's sessions in order, under a salt of the round's and the way's."""
    with gzip.open(requests, "rt") as lines:
        loaded = [json.loads(line) for line in lines]
    results = []
    for round_number in range(rounds):
        for way in WAYS:
            salt = f"replay-{round_number}-{way}-{time.time_ns()}"  # a cache of its own, cold
            if reset:  # engines that take no salt on this API start each way with an empty cache instead
                _reset_prefix_cache(origin, timeout)
            for request in loaded:
                if request["way"] != way or request["agent"] not in agents:
                    continue
                result = _send(origin, request["endpoint"], _for_engine(request, model, salt), timeout)
                results.append({"round": round_number, **{k: request[k] for k in ("agent", "session", "turn", "way")},
                                **result})
                print(json.dumps(results[-1]), flush=True)
    out.write_text(json.dumps({"engine": origin, "model": model, "rounds": rounds, "caption": _caption(origin),
                               "date": time.strftime("%Y-%m-%d"),
                               "results": results, "summary": summary(results)}, indent=1))


def _cpu_and_cores() -> str:
    import os
    import platform

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.lower().startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    gpu = ""
    try:
        import subprocess

        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    return f"{gpu + ', ' if gpu else ''}{len(os.sched_getaffinity(0))} cores of {model}"


def _caption(origin: str) -> dict[str, Any]:
    """The engine's version and model, and this machine, as found at run time."""
    import platform

    parts = urlsplit(origin)
    caption: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                               "where": _cpu_and_cores()}
    try:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        connection.request("GET", "/version")
        caption["vllm"] = json.loads(connection.getresponse().read()).get("version")
        connection.request("GET", "/v1/models")
        caption["models"] = json.loads(connection.getresponse().read()).get("data")
    except (OSError, ValueError):
        pass
    return caption


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per agent and way: the hit rate and TTFT of later turns and of new sessions' first turns (sessions 2 and
    3), each the median over rounds of the round's figure, with the range."""
    table: dict[str, Any] = {}
    for agent in sorted({r["agent"] for r in results}):
        for way in WAYS:
            cells: dict[str, list[float]] = {}
            for round_number in sorted({r["round"] for r in results}):
                rows = [r for r in results if r["agent"] == agent and r["way"] == way
                        and r["round"] == round_number and "error" not in r]
                later = [r for r in rows if r["turn"] > 1]
                new_sessions = [r for r in rows if r["turn"] == 1 and r["session"] > 1]
                for name, chosen in (("later_turns", later), ("new_session_first_turn", new_sessions)):
                    if chosen:
                        prompt = sum(r["prompt_tokens"] or 0 for r in chosen)
                        cells.setdefault(f"{name}_hit_rate", []).append(
                            sum(r["cached_tokens"] or 0 for r in chosen) / prompt if prompt else 0.0)
                        cells.setdefault(f"{name}_ttft_ms", []).append(
                            1000 * statistics.median(r["ttft_s"] for r in chosen if r["ttft_s"] is not None))
            table.setdefault(agent, {})[way] = {
                name: {"median": statistics.median(values), "min": min(values), "max": max(values)}
                for name, values in cells.items()}
            errors = sum(1 for r in results if r["agent"] == agent and r["way"] == way and "error" in r)
            table[agent][way]["errors"] = errors
    return table


def table(result: Path) -> str:
    """The summary as docs/benchmarks.md shows it: per way, new sessions' first turns and later turns."""
    data = json.loads(result.read_text())
    lines = ["| agent | way | new session's first turn: hit rate | TTFT (ms) | later turns: hit rate | TTFT (ms) |",
             "|---|---|---|---|---|---|"]

    def cell(figures: dict[str, Any], name: str, digits: int) -> str:
        figure = figures.get(name)
        if figure is None:
            return "-"
        return f"{figure['median']:.{digits}f} ({figure['min']:.{digits}f}-{figure['max']:.{digits}f})"

    for agent, ways in data["summary"].items():
        for way in WAYS:
            figures = ways.get(way)
            if figures is None:  # a result from before the way existed
                continue
            lines.append(f"| {agent} | {way} | {cell(figures, 'new_session_first_turn_hit_rate', 3)} | "
                         f"{cell(figures, 'new_session_first_turn_ttft_ms', 0)} | "
                         f"{cell(figures, 'later_turns_hit_rate', 3)} | {cell(figures, 'later_turns_ttft_ms', 0)} |")
    return "\n".join(lines)


def cpu_replay(requests: Path, template: Path | None, rounds: int, agents: list[str], out: Path) -> None:
    """``replay`` against the tiny model's vLLM CPU engine, started here and stopped after."""
    import tempfile

    sys.path.insert(0, str(HERE.parents[1]))
    from proxy.engine.process import LocalEngine, free_port
    from proxy.engine.tiny_model import ensure_tiny_model

    with tempfile.TemporaryDirectory() as data_dir:
        args = ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]
        if template is not None:
            args += ["--chat-template", str(template)]
        engine = LocalEngine(ensure_tiny_model(data_dir), served_model_name="m", port=free_port(),
                             log_path=Path(data_dir) / "engine.log", kv_cache_gib=2, extra_args=args,
                             extra_env={"VLLM_SERVER_DEV_MODE": "1"})
        engine.start()
        try:
            engine.wait_ready(600)
            replay(requests, engine.origin, "m", rounds, agents, out, 600, reset=True)
        finally:
            engine.stop()


def publish(result: Path, label: str, argv: list[str]) -> None:
    """The result as docs/agent_replay_LABEL.json, with its caption, and its table in docs/benchmarks.md."""
    sys.path.insert(0, str(HERE.parents[1]))
    from datetime import date

    from tests.bench import machine
    from tests.bench.report import portable, write_block

    data = portable(json.loads(result.read_text()))
    caption = data.get("caption", {})
    where = caption.get("where") or machine.machine()
    meta = {"date": data.get("date") or date.today().isoformat(), "where": where, "engine": caption,
            "rounds": data["rounds"], "output_tokens": OUTPUT_TOKENS, "command": " ".join(argv)}
    docs = HERE.parents[1] / "docs"
    (docs / f"agent_replay_{label}.json").write_text(json.dumps({"meta": meta, **data}, indent=1) + "\n")
    text = (f"Run of {meta['date']} on {where}, vLLM {caption.get('vllm')}; {data['rounds']} rounds, each way from an "
            f"empty prefix cache; {OUTPUT_TOKENS} output tokens a turn. Median of the rounds (range). "
            f"`docs/agent_replay_{label}.json`.\n\n" + table(result))
    write_block(docs / "benchmarks.md", f"agent_replay_{label}", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    made = steps.add_parser("prepare")
    made.add_argument("--out", type=Path, required=True)
    made.add_argument("--agents", default="claude_code,codex")
    sent = steps.add_parser("replay")
    sent.add_argument("--requests", type=Path, required=True)
    sent.add_argument("--engine", required=True, help="the engine's origin, e.g. http://127.0.0.1:8000")
    sent.add_argument("--model", required=True)
    sent.add_argument("--rounds", type=int, default=3)
    sent.add_argument("--agents", default="claude_code,codex")
    sent.add_argument("--timeout", type=float, default=600)
    sent.add_argument("--reset", action="store_true", help="empty the engine's prefix cache before each way")
    sent.add_argument("--out", type=Path, required=True)
    shown = steps.add_parser("table")
    shown.add_argument("result", type=Path)
    cpu = steps.add_parser("cpu-replay")
    cpu.add_argument("--requests", type=Path, required=True)
    cpu.add_argument("--template", type=Path, help="a chat template for the engine (default: the model's)")
    cpu.add_argument("--rounds", type=int, default=3)
    cpu.add_argument("--agents", default="claude_code,codex")
    cpu.add_argument("--out", type=Path, required=True)
    published = steps.add_parser("publish")
    published.add_argument("result", type=Path)
    published.add_argument("--label", required=True)
    published.add_argument("--command", required=True, help="the command that made the result, as run")
    args = parser.parse_args()
    if args.step == "table":
        print(table(args.result))
    elif args.step == "cpu-replay":
        cpu_replay(args.requests, args.template, args.rounds, args.agents.split(","), args.out)
    elif args.step == "publish":
        publish(args.result, args.label, [args.command])
    elif args.step == "prepare":
        prepare(args.out, args.agents.split(","))
    else:
        replay(args.requests, args.engine, args.model, args.rounds, args.agents.split(","), args.out, args.timeout,
               args.reset)


if __name__ == "__main__":
    main()
