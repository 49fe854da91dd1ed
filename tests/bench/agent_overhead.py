"""The gateway CPU of a coding agent's request (Claude Code's first turn, 51 KB: 24 tools, its system blocks,
its reminders) beside a short chat request's, with overhead.py's measurement.

One prefixgate (one uvicorn worker on CPU 0, aiohttp client, defaults: the billing block dropped, the system
text made canonical, the date and the git snapshot moved to the note, the conversation rendered for the pieces)
in front of the fake upstream (CPU 1), which answers both APIs with the same number of tokens: chat as chunks
ending ``[DONE]``, Messages as events ending ``message_stop``. wrk (CPU 1) keeps 64 connections busy, JSON and
streamed; each round sends the chat body and then the agent's body through the same gateway (the order reversed
every other round). Gateway CPU per request = (CPU time of its threads less its idle rate) / requests, as in
tests/bench/overhead.py; the ratio agent / chat is taken within each round. Writes docs/agent_overhead.json and
the ``agent_overhead`` block of docs/benchmarks.md.

With ``--tokenizer`` (a tokenizer.json, the tiny model's for one) it measures instead, in this process, what
counting the prompt's tokens costs when a tokenizer is configured: the captured Claude Code sessions replayed in
order, each request's pieces rendered as the gateway renders them, counted by the whole text's encode (what
``TokenCounter`` did before it counted piece by piece) beside ``TokenCounter``, each on freshly rendered strings;
CPU time of the count alone, the median of the rounds' requests of each kind. Writes the ``agent_token_count``
block of docs/benchmarks.md.

    python tests/bench/agent_overhead.py [--seconds 8] [--rounds 3] [--tokens 32]
    python tests/bench/agent_overhead.py --tokenizer PATH [--rounds 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.prompt.messages import messages_conversation, rewrite_messages  # noqa: E402
from policies.prompt.prompt import PromptPolicy  # noqa: E402
from policies.prompt.stable_prefix import Pieces, chat_pieces  # noqa: E402
from proxy.admission.token_count import TokenCounter  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.overhead import body  # noqa: E402
from tests.bench.report import write_block  # noqa: E402
from tests.bench.responses_overhead import side_by_side  # noqa: E402

ENDPOINTS = {"chat": "/v1/chat/completions", "agent": "/v1/messages"}
SESSIONS = ROOT / "tests" / "bench" / "agent_sessions" / "claude_code.jsonl.gz"


def agent_body() -> dict[str, Any]:
    """Claude Code's first request of its first captured session."""
    with gzip.open(SESSIONS, "rt") as lines:
        return json.loads(next(lines))["body"]


def payload(endpoint: str, stream: bool, tokens: int) -> dict[str, Any]:
    if endpoint == "chat":
        return body(stream, tokens, 0.0)
    return {**agent_body(), "model": "fake-model", "max_tokens": tokens, "stream": stream}


KINDS = {"first": "first request, nothing counted before",
         "session": "a new session's first request (the CLI's tools and system prompt seen before)",
         "turn": "the next turn of a session (the turn before seen)",
         "repeat": "the same request again"}


def rendered(line: str, policy: PromptPolicy) -> Pieces:
    """A captured request's pieces as the gateway renders them on its defaults, in fresh strings (their hashes not
    yet computed, as a request's are when it comes in)."""
    return chat_pieces(messages_conversation(rewrite_messages(json.loads(line)["body"], policy).body))


def cpu_ms(count: Callable[[Pieces], int], pieces: Pieces) -> tuple[int, float]:
    start = time.process_time_ns()
    tokens = count(pieces)
    return tokens, (time.process_time_ns() - start) / 1e6


def count_cost(tokenizer_path: str, rounds: int, out: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)

    def whole(pieces: Pieces) -> int:  # the count before TokenCounter's cache
        return len(tokenizer.encode("".join(pieces), add_special_tokens=False).ids)

    with gzip.open(SESSIONS, "rt") as lines:
        captured = list(lines)
    policy = PromptPolicy()
    cells: dict[str, dict[str, list[float]]] = {kind: {"before": [], "after": []} for kind in KINDS}
    for _ in range(rounds):
        counter = TokenCounter(tokenizer=tokenizer)
        for index, line in enumerate(captured):
            turn = json.loads(line)["turn"]
            for kind in ("turn" if turn > 1 else "first" if index == 0 else "session", "repeat"):
                expected, before = cpu_ms(whole, rendered(line, policy))
                tokens, after = cpu_ms(counter.count, rendered(line, policy))
                if tokens != expected:
                    sys.exit(f"request {index + 1}: {tokens} tokens counted by piece, {expected} whole")
                cells[kind]["before"].append(before)
                cells[kind]["after"].append(after)
    rows = [f"| {label} | {len(cells[kind]['after'])} | {statistics.median(cells[kind]['before']):.2f} | "
            f"{statistics.median(cells[kind]['after']):.3f} | "
            f"{statistics.median(cells[kind]['before']) / statistics.median(cells[kind]['after']):.0f}x |"
            for kind, label in KINDS.items()]
    table = "\n".join([
        f"Run of {date.today().isoformat()} on {machine.machine()}; {Path(tokenizer_path).parent.name}'s "
        f"tokenizer; {len(captured)} Claude Code requests (3 sessions of 5 turns) replayed {rounds} times, each "
        "request counted twice (the second: the same request again); CPU time of the count alone, median of "
        "the requests of each kind. Counts equal, piece by piece and whole, on every request.",
        "",
        "| request | requests | whole text encoded (ms) | TokenCounter (ms) | before / after |",
        "|---|---|---|---|---|",
        *rows])
    print(table)
    write_block(out, "agent_token_count", table)


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--tokenizer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    known, _ = parser.parse_known_args()
    if known.tokenizer is not None:
        count_cost(known.tokenizer, known.rounds, Path(known.out))
        return
    side_by_side(ENDPOINTS, {"chat": "chat", "agent": "agent"}, payload, "agent_overhead")


if __name__ == "__main__":
    main()
