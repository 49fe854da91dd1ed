"""Scrub a raw capture of tests/bench/agent_capture.py into a committed session file of
tests/bench/agent_sessions/ (gzip JSON lines, one request a line, in the order they were sent).

Each written line: {"session", "turn", "method", "path", "headers", "body"}. The rules:
  - the scratch repository's path becomes /home/user/project and the scratch $HOME /home/user (also in
    the dashed form Claude Code names its project folders with: -tmp-agentrepo becomes -home-user-project);
  - the machine's hostname and username become ``host`` and ``user`` where they appear as such
    (user@host, /home/USER, the hostname as a word when it is at least four characters long);
  - the API key the driver gave the CLIs becomes ``sk-redacted`` (the recorder already dropped the auth
    headers; anything else shaped like a key is reported, not changed: tool descriptions may cite examples);
  - each real session id (Claude Code's x-claude-code-session-id, Codex's session-id) becomes a fake UUID,
    the same one wherever the id occurs (headers, metadata.user_id, JSON inside headers, body text) and
    the same for the same CLI and session number on every recapture;
  - headers keep what the CLI says about itself; auth (dropped by the recorder already) and transport
    (host, content-length, connection, accept-encoding) go.
Everything else stays as sent: dates, git status, commit hashes, the billing header, item ids.

    python tests/bench/agent_capture_scrub.py --raw RAW.jsonl --out tests/bench/agent_sessions/codex.jsonl.gz \\
        --cli codex --repo /tmp/agentrepo --home /var/tmp/agent-capture/home-codex --api-key sk-test
"""

from __future__ import annotations

import argparse
import getpass
import gzip
import json
import re
import socket
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

PROJECT, HOME, KEY = "/home/user/project", "/home/user", "sk-redacted"
TRANSPORT = frozenset({"host", "content-length", "connection", "accept-encoding"})
SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "session_id", "thread-id")
FAKE_IDS = uuid.UUID("5e551011-0000-4000-8000-000000000000")


def _dashed(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def replacements(records: list[dict[str, Any]], cli: str, repo: str, home: str, api_key: str) -> list[tuple[str, str]]:
    """What to replace with what, longest first so a path inside another is replaced as the longer one."""
    pairs = {repo: PROJECT, _dashed(repo): _dashed(PROJECT), home: HOME, _dashed(home): _dashed(HOME)}
    if api_key:
        pairs[api_key] = KEY
    sessions: dict[str, int] = {}
    for record in records:
        for name in SESSION_HEADERS:
            real = record["headers"].get(name)
            if real and real not in sessions:
                sessions[real] = record["session"]
    for n, (real, session) in enumerate(sessions.items()):
        pairs[real] = str(uuid.uuid5(FAKE_IDS, f"{cli}/session-{session}/{n}"))
    user, host = getpass.getuser(), socket.gethostname()
    pairs[f"{user}@{host}"] = "user@host"
    pairs[f"/home/{user}"] = HOME
    return sorted(pairs.items(), key=lambda pair: -len(pair[0]))


def _scrub_text(text: str, pairs: list[tuple[str, str]], host: str) -> str:
    for real, fake in pairs:
        text = text.replace(real, fake)
    if len(host) >= 4:
        text = re.sub(rf"\b{re.escape(host)}\b", "host", text)
    return text


def scrub(value: Any, pairs: list[tuple[str, str]], host: str) -> Any:
    if isinstance(value, str):
        return _scrub_text(value, pairs, host)
    if isinstance(value, list):
        return [scrub(item, pairs, host) for item in value]
    if isinstance(value, dict):
        return {scrub(k, pairs, host): scrub(v, pairs, host) for k, v in value.items()}
    return value


def written(record: dict[str, Any], pairs: list[tuple[str, str]], host: str) -> dict[str, Any]:
    headers = {k: v for k, v in record["headers"].items() if k not in TRANSPORT}
    return {"session": record["session"], "turn": record["turn"], "method": record["method"],
            "path": scrub(record["path"], pairs, host), "headers": scrub(headers, pairs, host),
            "body": scrub(record["body"], pairs, host)}


def leftovers(lines: list[str], pairs: list[tuple[str, str]]) -> list[str]:
    """Real values still present after scrubbing (should be none)."""
    text = "\n".join(lines)
    return [real for real, _ in pairs if real in text and real not in (PROJECT, HOME)]


def key_like(lines: list[str]) -> set[str]:
    return set(re.findall(r"\b(?:sk|sk-ant|sk-proj)-[A-Za-z0-9_-]{16,}", "\n".join(lines))) - {KEY}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--raw", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cli", required=True, help="claude_code or codex: names the fake session ids")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--home", required=True)
    parser.add_argument("--api-key", default="")
    args = parser.parse_args()
    records = [json.loads(line) for line in args.raw.read_text().splitlines() if line.strip()]
    records = [r for r in records if r["session"] is not None]
    pairs, host = replacements(records, args.cli, args.repo, args.home, args.api_key), socket.gethostname()
    lines = [json.dumps(written(r, pairs, host), ensure_ascii=False) for r in records]
    left = leftovers(lines, pairs)
    if left:
        raise SystemExit(f"still present after scrubbing: {left}")
    for key in sorted(key_like(lines)):
        print(f"warning: a string shaped like an API key is left as sent: {key[:12]}...")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as out:
        out.write(("\n".join(lines) + "\n").encode())
    per_turn = Counter((r["session"], r["turn"], r["method"], r["path"]) for r in records)
    print(f"{args.out}: {len(lines)} requests")
    for (session, turn, method, path), count in sorted(per_turn.items()):
        print(f"  session {session} turn {turn}: {count} x {method} {path}")


if __name__ == "__main__":
    main()
