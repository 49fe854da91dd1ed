"""Detector coverage: the share of each real-world timestamp and ID format the volatile detectors find,
and the detections on the negative corpus (text that must stay as it is).

A line counts as detected when one span covers the whole value. The formats come from two seeded
corpora, so every run measures the same text: tests/support/volatile_formats.py (generated as the bench
runs, 20 lines per format) and tests/policies/data/volatile_formats.json (more formats, 8 lines each,
written out by ``--write-corpus`` from the generators below). Formats marked "left alone" are not
sought on purpose (a bare number, a random string or a clock with no date looks like much that is not
volatile); the corpus file says why for each of its own.

    python tests/bench/detector_coverage.py                 # docs/detector_coverage.json and its block
    python tests/bench/detector_coverage.py --write-corpus  # rewrites tests/policies/data/volatile_formats.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.prompt.volatile import find_volatile  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402
from tests.support.volatile_formats import FORMATS, PER_FORMAT, samples  # noqa: E402

DATA = ROOT / "tests" / "policies" / "data"
NEGATIVES = DATA / "negative_corpus.txt"
CORPUS = DATA / "volatile_formats.json"
CORPUS_LINES = 8

MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# (offset, abbreviation, IANA zone)
ZONES = [("+01:00", "CET", "Europe/Paris"), ("-05:00", "EST", "America/New_York"), ("+00:00", "UTC", "UTC"),
         ("+05:30", "IST", "Asia/Kolkata"), ("-08:00", "PST", "America/Los_Angeles")]


def moment(rng: random.Random) -> datetime:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    return start + timedelta(seconds=rng.randrange(3 * 365 * 86400), microseconds=rng.randrange(10**6))


def zoned(rng: random.Random) -> tuple[datetime, str, str, str]:
    offset, name, region = rng.choice(ZONES)
    delta = timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6]))
    return moment(rng).astimezone(timezone(delta if offset[0] == "+" else -delta)), offset, name, region


def hexes(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(length))


def epoch(scale: int) -> Callable[[random.Random], str]:
    """Unix time in seconds (1), milliseconds (1000) ... nanoseconds (10**9), without float rounding."""
    def make(rng: random.Random) -> str:
        m = moment(rng)
        return str(int(m.timestamp()) * scale + (m.microsecond * 1000 + rng.randrange(1000)) * scale // 10**9)
    return make


def go_now(rng: random.Random) -> str:
    """Go's time.Now().String(): the wall clock, then the monotonic reading."""
    m, offset, name, _ = zoned(rng)
    return (f"{m:%Y-%m-%d %H:%M:%S}.{rng.randrange(10**9):09d} {offset.replace(':', '')} {name} "
            f"m=+{rng.randrange(100000)}.{rng.randrange(10**9):09d}")


def js_locale(rng: random.Random) -> str:
    m = moment(rng)
    return f"{m.month}/{m.day}/{m.year}, {(m.hour - 1) % 12 + 1}:{m:%M:%S %p}"


def xray(rng: random.Random) -> str:
    seconds = int(moment(rng).timestamp())
    return f"Root=1-{seconds:08x}-{hexes(rng, 24)};Parent={hexes(rng, 16)};Sampled={rng.choice('01')}"


def twitter_snowflake(rng: random.Random) -> str:
    return str(((int(moment(rng).timestamp() * 1000) - 1288834974657) << 22) | rng.randrange(1 << 22))


def rfc850(rng: random.Random) -> str:
    m = moment(rng)
    return f"{WEEKDAYS[m.weekday()]}, {m:%d}-{MONTHS[m.month - 1]}-{m:%y %H:%M:%S} GMT"


# name -> (make a value, lines that carry it, why it is left alone or "" where it is sought)
EXTRA: dict[str, tuple[Callable[[random.Random], str], list[str], str]] = {
    "structlog ISO, utc=False (no zone)": (
        lambda r: moment(r).replace(tzinfo=None).isoformat(timespec="microseconds"),
        ['{{"event": "cache miss", "timestamp": "{v}"}}', "{v} [info     ] cache miss"], ""),
    "structlog ConsoleRenderer default": (
        lambda r: f"{moment(r):%Y-%m-%d %H:%M:%S}", ["{v} [info     ] user logged in     user_id=42"], ""),
    "Python ISO with offset (astimezone)": (
        lambda r: zoned(r)[0].isoformat(timespec="microseconds"), ['{{"time": "{v}", "level": "info"}}'], ""),
    "Python logging datefmt %m/%d/%Y %I:%M:%S %p": (
        lambda r: f"{moment(r):%m/%d/%Y %I:%M:%S %p}", ["{v} is when this event was logged."], ""),
    "Python logging datefmt %d-%b-%y %H:%M:%S": (
        lambda r: (lambda m: f"{m:%d}-{MONTHS[m.month - 1]}-{m:%y %H:%M:%S}")(moment(r)),
        ["{v} - Admin logged in", "{v} - WARNING - disk almost full"], ""),
    "Unix epoch s with fraction (time.time(), Slack ts)": (
        lambda r: f"{moment(r).timestamp():.6f}", ['{{"event": "login", "timestamp": {v}}}', '"ts": "{v}"'], ""),
    "Unix epoch ms, camelCase key": (
        epoch(1000), ['{{"createdAt": {v}}}', '{{"id": 7, "updatedAt": {v}}}', "lastSeenAt={v}"], ""),
    "Unix epoch s, *_at / *_ts key": (
        epoch(1), ['{{"created_at": {v}}}', '"expires_at": {v},', "event_ts={v}"], ""),
    "JWT iat / exp claims": (
        epoch(1), ['{{"sub": "u_42", "iat": {v}}}', '{{"aud": "api", "exp": {v}}}'], ""),
    "OTLP JSON timeUnixNano (ns)": (
        epoch(10**9), ['{{"timeUnixNano": "{v}", "severityText": "INFO"}}', '"startTimeUnixNano": "{v}",'], ""),
    "OTLP JSON traceId (camelCase)": (
        lambda r: hexes(r, 32), ['{{"traceId": "{v}", "name": "GET /orders"}}'], ""),
    "OpenTelemetry trace ID, bare": (
        lambda r: hexes(r, 32), ["[{v}] GET /orders 200"],
        "32 hex digits with no key are also MD5 sums and content hashes, which are stable"),
    "Go time.Now().String() (monotonic)": (go_now, ["started at {v}"], ""),
    "Go StampMilli": (
        lambda r: (lambda m: f"{MONTHS[m.month - 1]} {m.day:2d} {m:%H:%M:%S}.{m.microsecond // 1000:03d}")(moment(r)),
        ["{v} web-1 app[311]: ready"], ""),
    "Java ZonedDateTime.toString()": (
        lambda r: (lambda z: z[0].isoformat(timespec="milliseconds") + f"[{z[3]}]")(zoned(r)),
        ["Order created {v} by the scheduler"], ""),
    "JavaScript toLocaleString() (en-US)": (js_locale, ["Client time: {v}", "Saved {v}"], ""),
    "Apache / nginx common log format": (
        lambda r: (lambda z: f"{z[0]:%d}/{MONTHS[z[0].month - 1]}/{z[0]:%Y:%H:%M:%S} {z[1].replace(':', '')}")(
            zoned(r)), ['203.0.113.7 - - [{v}] "GET /api/orders HTTP/1.1" 200 612'], ""),
    "Cookie Expires (RFC 6265)": (
        lambda r: (lambda m: f"{m:%a}, {m:%d}-{MONTHS[m.month - 1]}-{m:%Y %H:%M:%S} GMT")(moment(r)),
        ["Set-Cookie: sid=a1b2; Expires={v}; Path=/; HttpOnly"], ""),
    "RFC 850 date": (rfc850, ["stamped {v} by the old proxy"], ""),
    "RFC 2822 with zone comment": (
        lambda r: f"{moment(r):%a, %d %b %Y %H:%M:%S} +0000 (UTC)", ["Received: from mx1 by mx2; {v}"], ""),
    "klog / glog header (Kubernetes)": (
        lambda r: (lambda m: f"{'IWE'[r.randrange(3)]}{m:%m%d %H:%M:%S.%f}")(moment(r)),
        ["{v}       1 controller.go:231] Starting workers"], ""),
    "AWS X-Ray trace header": (xray, ["X-Amzn-Trace-Id: {v}", '"traceHeader": "{v}"'], ""),
    "AWS SigV4 X-Amz-Date (basic ISO 8601)": (
        lambda r: f"{moment(r):%Y%m%dT%H%M%SZ}", ["X-Amz-Date: {v}", "&X-Amz-Date={v}&X-Amz-Expires=900"], ""),
    ".NET JSON date": (
        lambda r: f"\\/Date({epoch(1000)(r)})\\/", ['{{"Created": "{v}"}}'], ""),
    "Snowflake, Twitter epoch, with key": (
        twitter_snowflake, ['"message_id": "{v}"', "event_id={v}"], ""),
    "Unix epoch ms, bare (Date.now())": (
        epoch(1000), ["event {v} accepted"], "a bare 13-digit number is as likely an order or account number"),
    "Clock only, ms (Logback HH:mm:ss.SSS)": (
        lambda r: f"{moment(r):%H:%M:%S}.{r.randrange(1000):03d}", ["{v} [main] INFO  com.acme.App - started"],
        "a clock with no date has the shape of media and subtitle cue times (00:01:02.500)"),
}


def write_corpus() -> None:
    formats = {}
    for name, (make, lines, why) in EXTRA.items():
        rng = random.Random(f"corpus:{name}")
        values = [make(rng) for _ in range(CORPUS_LINES)]
        entry: dict = {"sought": not why}
        if why:
            entry["why"] = why
        entry["samples"] = [{"line": lines[i % len(lines)].format(v=v), "value": v} for i, v in enumerate(values)]
        formats[name] = entry
    about = ("Timestamps and IDs as real apps write them, in the lines apps paste into prompts; written by "
             "python tests/bench/detector_coverage.py --write-corpus (seeded). A format that is not sought "
             "says why.")
    # one sample a line, so the file reads (and diffs) as the lines it holds
    text = json.dumps({"about": about, "formats": formats}, indent=1, ensure_ascii=False)
    text = re.sub(r'\{\n\s+("line": .*),\n\s+("value": .*)\n\s+\}', r"{\1, \2}", text)
    CORPUS.write_text(text + "\n")


def corpus() -> dict[str, tuple[bool, list[tuple[str, str]]]]:
    """Every format of both corpora: name -> (sought, [(line, value), ...])."""
    found = {name: (sought, list(samples(name))) for name, (_, _, sought) in FORMATS.items()}
    for name, entry in json.loads(CORPUS.read_text())["formats"].items():
        found[name] = (entry["sought"], [(s["line"], s["value"]) for s in entry["samples"]])
    return found


def detected(line: str, value: str) -> bool:
    start = line.index(value)
    return any(span.start <= start and span.end >= start + len(value) for span in find_volatile(line))


def measure() -> dict:
    formats = {}
    for name, (sought, pairs) in corpus().items():
        hits = sum(detected(line, value) for line, value in pairs)
        formats[name] = {"sought": sought, "lines": len(pairs), "detected": hits}
    negatives = [line for line in NEGATIVES.read_text().splitlines() if line.strip()]
    flagged = [line for line in negatives if find_volatile(line)]
    return {"formats": formats, "negative_lines": len(negatives), "negative_detections": len(flagged),
            "negative_examples": flagged[:10]}


def table(results: dict, command: str, caption: str) -> str:
    rows = [f"| {name} | {'yes' if row['sought'] else 'no (left alone)'} | {row['detected']} / {row['lines']} "
            f"| {row['detected'] / row['lines']:.0%} |" for name, row in results["formats"].items()]
    sought = [row for row in results["formats"].values() if row["sought"]]
    return "\n".join([
        f"Command: `{command}`; {caption}. Result file: `docs/detector_coverage.json`.", "",
        "| format | sought | lines detected | rate |", "|---|---|---|---|", *rows, "",
        f"Sought formats fully detected: {sum(r['detected'] == r['lines'] for r in sought)} of {len(sought)}. "
        f"Negative corpus: {results['negative_detections']} detections in {results['negative_lines']} lines.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--write-corpus", action="store_true", help=f"rewrite {CORPUS.relative_to(ROOT)} and stop")
    args = parser.parse_args()
    if args.write_corpus:
        write_corpus()
        print(f"wrote {CORPUS.relative_to(ROOT)}")
        return
    results = measure()
    command = command_line("detector_coverage.py", sys.argv[1:])
    today, where = date.today().isoformat(), machine.machine()
    block = table(results, command, f"run of {today} on {where}")
    print(block)
    meta = {"date": today, "machine": where, "command": command, "lines_per_format": {
        "tests/support/volatile_formats.py": PER_FORMAT, str(CORPUS.relative_to(ROOT)): CORPUS_LINES}}
    write_result(args.out, "detector_coverage", meta, results)
    write_block(args.out, "detector_coverage", block)


if __name__ == "__main__":
    main()
