"""Timestamps and IDs as common logging, tracing and ID libraries emit them, in the lines apps paste
into prompts: for measuring which formats the volatile detectors find (tests/bench/detector_coverage.py)
and for the tests that hold the ones they must find.

Each format yields (line, value) pairs from a seeded generator: the value is what a detector must cover
for the line to count as detected. ``EXPECTED`` says whether prefixgate means to find a format: a value
that carries no mark of being a time or an ID (a bare 10-digit number, a random 27-character KSUID)
is left alone on purpose, since text like it is everywhere in prompts that are not volatile.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

Sample = tuple[str, str]  # (line, value)
PER_FORMAT = 20
WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ZONES = [("+01:00", "CET"), ("-05:00", "EST"), ("+00:00", "UTC"), ("+05:30", "IST"), ("-08:00", "PST")]


def _moment(rng: random.Random) -> datetime:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    return start + timedelta(seconds=rng.randrange(3 * 365 * 86400), microseconds=rng.randrange(10**6))


def _zoned(rng: random.Random) -> tuple[datetime, str, str]:
    offset, name = rng.choice(ZONES)
    sign = 1 if offset[0] == "+" else -1
    hours, minutes = int(offset[1:3]), int(offset[4:6])
    zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
    return _moment(rng).astimezone(zone), offset, name


def _js_to_string(rng: random.Random) -> str:
    moment, offset, name = _zoned(rng)
    long_names = {"CET": "Central European Standard Time", "EST": "Eastern Standard Time",
                  "UTC": "Coordinated Universal Time", "IST": "India Standard Time", "PST": "Pacific Standard Time"}
    return (f"{WEEKDAYS[moment.weekday()]} {MONTHS[moment.month - 1]} {moment.day:02d} {moment.year} "
            f"{moment:%H:%M:%S} GMT{offset.replace(':', '')} ({long_names[name]})")


def _go_string(rng: random.Random) -> str:
    moment, offset, name = _zoned(rng)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{rng.randrange(10**9):09d} {offset.replace(':', '')} {name}"


def _ulid(rng: random.Random) -> str:
    millis = int(_moment(rng).timestamp() * 1000)
    time_part = "".join(CROCKFORD[(millis >> shift) & 31] for shift in range(45, -1, -5))
    return time_part + "".join(rng.choice(CROCKFORD) for _ in range(16))


def _ksuid(rng: random.Random) -> str:
    return "".join(rng.choice(string.digits + string.ascii_letters) for _ in range(27))


def _snowflake(rng: random.Random) -> str:
    millis = int(_moment(rng).timestamp() * 1000) - 1420070400000  # Discord's epoch
    return str((millis << 22) | rng.randrange(1 << 22))


def _uuid(version: int) -> Callable[[random.Random], str]:
    def make(rng: random.Random) -> str:
        value = uuid.UUID(int=rng.getrandbits(128), version=4)
        hexed = value.hex[:12] + str(version) + value.hex[13:]
        text = str(uuid.UUID(hexed))
        return text.upper() if rng.random() < 0.3 else text
    return make


def _hex(length: int) -> Callable[[random.Random], str]:
    return lambda rng: "".join(rng.choice("0123456789abcdef") for _ in range(length))


def _epoch(scale: int) -> Callable[[random.Random], str]:
    return lambda rng: str(int(_moment(rng).timestamp() * scale))


# name -> (make a value, lines that carry it, expected to be found)
FORMATS: dict[str, tuple[Callable[[random.Random], str], list[str], bool]] = {
    "Python logging asctime": (lambda r: f"{_moment(r):%Y-%m-%d %H:%M:%S},{r.randrange(1000):03d}",
                               ["{v} INFO app.orders: order placed", "{v} - worker - WARNING - retrying"], True),
    "structlog ISO (Z)": (lambda r: _moment(r).isoformat(timespec="microseconds").replace("+00:00", "Z"),
                          ['{{"event": "login", "timestamp": "{v}"}}', "{v} [info     ] request finished"], True),
    "OpenTelemetry trace_id": (_hex(32), ['"trace_id": "{v}"', "trace_id={v} span ended"], True),
    "OpenTelemetry span_id": (_hex(16), ['"span_id": "{v}"', "spanId={v}"], True),
    "W3C traceparent": (lambda r: f"00-{_hex(32)(r)}-{_hex(16)(r)}-01", ["traceparent: {v}"], True),
    "JavaScript Date.toString()": (_js_to_string, ["Client time: {v}", "Sent {v} from the browser"], True),
    "JavaScript toISOString()": (lambda r: _moment(r).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                                 ['{{"createdAt": "{v}"}}', "updated {v}"], True),
    "JavaScript toUTCString() / RFC 1123": (lambda r: f"{_moment(r):%a, %d %b %Y %H:%M:%S} GMT",
                                            ["Date: {v}", "Last-Modified: {v}"], True),
    "RFC 2822": (lambda r: (lambda m: f"{m[0]:%a, %d %b %Y %H:%M:%S} {m[1].replace(':', '')}")(_zoned(r)),
                 ["Date: {v}", "Received mail on {v}"], True),
    "Go RFC3339": (lambda r: _zoned(r)[0].isoformat(timespec="seconds"), ['time="{v}" level=info', "at {v}"], True),
    "Go RFC3339Nano": (lambda r: (lambda m: f"{m:%Y-%m-%dT%H:%M:%S}.{r.randrange(10**9):09d}"
                                            f"{m.isoformat()[-6:]}")(_zoned(r)[0]), ['"ts":"{v}"'], True),
    "Go time.Time.String()": (_go_string, ["started at {v}", "deadline {v} passed"], True),
    "Go ANSIC": (lambda r: (lambda m: f"{m:%a %b} {m.day:2d} {m:%H:%M:%S %Y}")(_moment(r)),
                 ["built {v}", "{v}: cron run"], True),
    "Go UnixDate": (lambda r: (lambda m: f"{m[0]:%a %b} {m[0].day:2d} {m[0]:%H:%M:%S} {m[2]} {m[0]:%Y}")(_zoned(r)),
                    ["date says {v}", "{v}"], True),
    "Go RubyDate": (lambda r: (lambda m: f"{m[0]:%a %b %d %H:%M:%S} {m[1].replace(':', '')} {m[0]:%Y}")(_zoned(r)),
                    ["created {v}"], True),
    "syslog / Go Stamp": (lambda r: (lambda m: f"{m:%b} {m.day:2d} {m:%H:%M:%S}")(_moment(r)),
                          ["{v} web-1 nginx[311]: GET /health 200"], True),
    "Unix epoch s, with key": (_epoch(1), ['{{"ts": {v}}}', "timestamp={v}", "created_at: {v}"], True),
    "Unix epoch ms, with key": (_epoch(1000), ['{{"timestamp": {v}}}', "time={v}"], True),
    "Unix epoch us, with key": (_epoch(10**6), ['{{"ts": {v}}}', "timestamp={v}"], True),
    "Unix epoch s, bare": (_epoch(1), ["event {v} accepted", "got {v} from the queue"], False),
    "Unix epoch ms, after words that name a moment": (
        _epoch(1000), ["Report generated at {v} by the planner.", "last updated {v}", "cache valid since {v}.",
                       "{v} ms since the epoch"], True),
    "Unix epoch s, after words that name a moment": (
        _epoch(1), ["generated at {v}", "Created on {v} (unix time)", "expires {v}"], True),
    "UUID v1": (_uuid(1), ["Session {v} opened", '"request": "{v}"'], True),
    "UUID v4": (_uuid(4), ["Session {v} opened", '"request": "{v}"'], True),
    "UUID v7": (_uuid(7), ["Session {v} opened", '"request": "{v}"'], True),
    "ULID, with key": (_ulid, ["request_id={v}", '"message_id": "{v}"'], True),
    "ULID, bare": (_ulid, ["job {v} queued", "ref {v}"], True),
    "KSUID, with key": (_ksuid, ["request_id={v}", '"event_id": "{v}"'], True),
    "KSUID, bare": (_ksuid, ["object {v} stored"], False),
    "Snowflake, with key": (_snowflake, ['"message_id": "{v}"', "msg_id={v}"], True),
    "Snowflake, bare": (_snowflake, ["user {v} joined"], False),
    "Mongo ObjectId, with key": (_hex(24), ['"session_id": "{v}"', "correlation_id={v}"], True),
    "Mongo ObjectId, bare": (_hex(24), ['{{"_id": "{v}"}}'], False),
    "Go Kitchen (3:04PM)": (lambda r: f"{r.randrange(1, 13)}:{r.randrange(60):02d}{r.choice(['AM', 'PM'])}",
                            ["see you at {v}"], False),
}


def samples(name: str, count: int = PER_FORMAT, seed: int = 0) -> Iterator[Sample]:
    """``count`` (line, value) pairs of format ``name``, the same for the same seed."""
    make, lines, _ = FORMATS[name]
    rng = random.Random(f"{seed}:{name}")
    for index in range(count):
        value = make(rng)
        yield lines[index % len(lines)].format(v=value), value
