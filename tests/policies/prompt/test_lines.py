"""The per-line scan cache: a repeated prompt is scanned only for its new lines, with the same result."""

from __future__ import annotations

from policies.prompt.lines import MAX_CACHED_LINE, LineScanner
from policies.prompt.prompt import PromptPolicy, rewrite_chat
from policies.prompt.volatile import custom_detectors

BODY_LINES = [f"Rule {n}: answer in at most {n + 2} sentences." for n in range(50)]


def system(clock: str) -> dict:
    text = "\n".join([f"Current time: {clock}", *BODY_LINES])
    return {"model": "m", "messages": [{"role": "system", "content": text}, {"role": "user", "content": "Hi"}]}


def test_only_new_lines_are_scanned_on_a_repeated_prompt() -> None:
    policy = PromptPolicy()
    first = rewrite_chat(system("2026-11-22 11:51:13 UTC"), policy)
    misses = policy.scanner.cache_info()["misses"]
    second = rewrite_chat(system("2026-11-22 11:52:40 UTC"), policy)
    assert policy.scanner.cache_info()["misses"] == misses + 1  # the clock line only
    assert first.body["messages"][0] == second.body["messages"][0]
    assert second.body["messages"][1]["content"].endswith("Current time: 2026-11-22 11:52:40 UTC")


def test_cached_and_uncached_scans_agree() -> None:
    scanner = LineScanner()
    lines = ["Seen at 2026-11-22.  ", "Cafe\u0301 menu", "", "x" * (MAX_CACHED_LINE + 1) + " 2026-11-22"]
    once, twice = scanner.scan_canonical(lines), scanner.scan_canonical(lines)
    assert once == twice
    assert [line for line, _ in once][:3] == ["Seen at 2026-11-22.", "Caf\u00e9 menu", ""]
    assert [len(spans) for _, spans in once] == [1, 0, 0, 1]
    assert scanner.cache_info()["lines"] == 3  # the over-long line is scanned each time, never kept


def test_tenant_detectors_apply_per_line() -> None:
    scanner = LineScanner(custom_detectors([("ticket", r"TICKET-\d+")]))
    [(_, spans)] = scanner.scan_raw(["Working on TICKET-4411 today"])
    assert [(span.kind, span.start, span.end) for span in spans] == [("ticket", 11, 22)]
