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

    python tests/bench/agent_overhead.py [--seconds 8] [--rounds 3] [--tokens 32]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.overhead import body  # noqa: E402
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


def main() -> None:
    side_by_side(ENDPOINTS, {"chat": "chat", "agent": "agent"}, payload, "agent_overhead")


if __name__ == "__main__":
    main()
