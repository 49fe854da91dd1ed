"""Find volatile spans (clock readings, dates, UUIDs, trace and request IDs) in prompt text.

vLLM's prefix cache hashes KV blocks in a chain from the first token, so one timestamp near the
top of a prompt makes every later block miss. These detectors find such spans so the prompt
policy can move them to the tail. They are tuned against false positives: a pattern must look
like a calendar date or clock reading with valid field ranges, or carry a label (``trace_id=``,
``Current time:``), or follow words that name a moment (``generated at 1795961234567``), before it
counts; version numbers, prices, phone numbers and code do not. No detector reads the clock: what
counts never changes with the day a line is scanned, so the line cache stays right.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_WEEKDAYS = r"(?:Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?|Thu(?:rs(?:day)?)?|Fri(?:day)?|Sat(?:urday)?|Sun(?:day)?)"
_YEAR = r"(?:19|20)\d\d"
_MM = r"(?:0?[1-9]|1[0-2])"
_DD = r"(?:0?[1-9]|[12]\d|3[01])"
_OFFSET = r"[+-](?:[01]\d|2[0-3]):?[0-5]\d"
# Z, UTC, +01:00; JavaScript's "GMT+0100 (Central European Standard Time)"; Go's "+0000 UTC"; CET, PDT;
# a mail header's "+0000 (UTC)"
_ZONE_NAME = r"\s\([A-Z][A-Za-z .]{2,60}\)"
_ZONE = (rf"(?:\s?(?:(?:UTC|GMT){_OFFSET}(?:{_ZONE_NAME})?|{_OFFSET}{_ZONE_NAME}"
         rf"|(?:Z|UTC|GMT|{_OFFSET}(?:\s[A-Z]{{2,5}})?|[A-Z][A-Z]?[SD]?T)\b))")
_CLOCK = rf"(?:(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d{{1,9}})?)?(?:\s?[AaPp]\.?[Mm]\.?)?{_ZONE}?)"
_TIME_AFTER = rf"(?:(?:[T ]|,?\s(?:at\s)?){_CLOCK})?"
_HHMMSS = r"(?:[01]\d|2[0-3])[0-5]\d[0-5]\d"
# Letters, digits or a joining dot/dash/slash on either side mean the match is part of a bigger token.
_L = r"(?<![\w./:-])"
_R = r"(?![\w/:-]|\.\d)"

_DATE_PATTERNS: list[tuple[str, str]] = [
    # ISO 8601 (2026-11-22, 2026-11-22T11:51:13.123Z, 2026-11-22 11:51+01:00) and 2026/11/22 11:51; Java's
    # zone ID (+01:00[Europe/Paris]), Go's monotonic reading (+0000 UTC m=+0.000123456); the basic form
    # 20261122T115113Z (AWS SigV4, iCalendar)
    ("datetime", rf"{_L}{_YEAR}(?:([-/]){_MM}\1{_DD}(?:(?:[T ]{_CLOCK}|T{_HHMMSS}{_ZONE}?)"
                 rf"(?:\[[A-Za-z]+(?:/[A-Za-z_+-]+){{0,2}}\])?(?:\sm=[+-]\d+\.\d{{1,9}})?)?"
                 rf"|(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])T{_HHMMSS}(?:[.,]\d{{1,9}})?(?:Z|{_OFFSET})?){_R}"),
    # RFC 2822 / HTTP dates: Sun, 22 Nov 2026 11:51:13 GMT (a mail header may pad the day: Fri,  4 May)
    ("datetime", rf"{_L}{_WEEKDAYS},?\s{{1,2}}{_DD}\s{_MONTHS}\s{_YEAR}(?:\s{_CLOCK})?{_R}"),
    # 11/22/2026, 22.11.2026, 22-11-2026 (US and European numeric orders), optional time
    ("datetime", rf"{_L}(?:{_MM}/{_DD}/{_YEAR}|{_DD}/{_MM}/{_YEAR}|{_DD}\.{_MM}\.{_YEAR}|{_DD}-{_MM}-{_YEAR})"
                 rf"{_TIME_AFTER}{_R}"),
    # November 22, 2026 / Sunday, November 22nd 2026, 11:51 AM / 22 November 2026
    ("datetime", rf"{_L}(?:{_WEEKDAYS},?\s)?{_MONTHS}\.?\s{_DD}(?:st|nd|rd|th)?,?\s{_YEAR}{_TIME_AFTER}{_R}"),
    ("datetime", rf"{_L}(?:{_WEEKDAYS},?\s)?{_DD}(?:st|nd|rd|th)?\s{_MONTHS}\.?,?\s{_YEAR}{_TIME_AFTER}{_R}"),
    # Day-month-year with a dash or slash: 24-Nov-2026, cookie expiry Tue, 24-Nov-2026 14:03:07 GMT, and
    # the common log format of Apache and nginx: [24/Nov/2026:14:03:07 +0100]
    ("datetime", rf"{_L}(?:{_WEEKDAYS},?\s)?{_DD}([-/]){_MONTHS}\1{_YEAR}(?:[\s:]{_CLOCK})?{_R}"),
    # C's asctime and Go's ANSIC, UnixDate, RubyDate: Tue Nov 24 14:03:07 [MST|-0700] 2026
    # (a colon may follow, as where such a stamp starts a log line; a colon and a digit may not)
    ("datetime", rf"{_L}{_WEEKDAYS}\s{_MONTHS}\s{{1,2}}{_DD}\s{_CLOCK}\s{_YEAR}(?![\w/-]|[:.]\d)"),
    # 2026年11月22日 11:51
    ("datetime", rf"{_YEAR}\s?年\s?{_MM}\s?月\s?{_DD}\s?[日号]"
                 r"(?:\s?(?:[01]?\d|2[0-3])[:\uff1a][0-5]\d(?:[:\uff1a][0-5]\d)?)?"),
]

_HEX = "0-9a-fA-F"
_ID_LABEL = (
    r"(?:x[-_])?(?:trace|span|request|req|session|correlation|conversation|run|message|msg|transaction|"
    r"invocation|call|event)[-_ ]?id"
)
# Keys that name a moment, any case: ts, time, timestamp, date, epoch, now, created, updated, modified,
# expires, *_at, *_ts, *_time, unixtime, and JWT's iat/exp/nbf; or camelCase: createdAt, startTime,
# sentTs. A unit may follow: _ms, Millis, UnixNano.
_EPOCH_KEY = (
    r"(?:(?i:(?:[a-z]+[_-]){0,3}(?:timestamp|time|ts|date|epoch|at|now|created|updated|modified|expires?|"
    r"expiry|iat|exp|nbf|unixtime))|[a-z]+(?:[A-Z][a-z]+)*?(?:Time(?:stamp)?|At|Ts|Date|Epoch))"
    r"(?i:[_-]?(?:unix)?[_-]?(?:nanos?|micros?|millis?|ms|us|ns|secs?|seconds))?"
)
_EPOCH_VALUE = r"[\"']?\s*[:=]\s*[\"']?1\d{9}"
_OTHER_PATTERNS: list[tuple[str, str]] = [
    # W3C traceparent: version-traceid-parentid-flags
    ("traceparent", rf"(?:\btraceparent[\"']?\s*[:=]\s*[\"']?)?(?<![{_HEX}-])[{_HEX}]{{2}}-[{_HEX}]{{32}}-"
                    rf"[{_HEX}]{{16}}-[{_HEX}]{{2}}(?![{_HEX}-])"),
    # RFC 9562 UUIDs, versions 1-8
    ("uuid", rf"(?<![{_HEX}-])[{_HEX}]{{8}}-[{_HEX}]{{4}}-[1-8][{_HEX}]{{3}}-[89abAB][{_HEX}]{{3}}-[{_HEX}]{{12}}"
             rf"(?![{_HEX}-])"),
    # Labelled IDs: trace_id=4bf92f35..., "requestId": "req_8ZtQ2...", Session ID: 9f8e7d6c5b4a
    ("id", rf"(?i:\b{_ID_LABEL})[\"']?\s*[:=]\s*[\"']?(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{{8,}}(?![A-Za-z0-9_-])"),
    # Unix epoch seconds (10 digits, a fraction allowed), milliseconds (13), microseconds (16) or
    # nanoseconds (19) under a key that names a moment: ts, created_at, createdAt, timeUnixNano, exp
    # (the look-ahead reads each word once, possessively, and tries the keys only where a number follows)
    ("epoch", rf"(?<![\w-])(?=[\w-]++{_EPOCH_VALUE}){_EPOCH_KEY}{_EPOCH_VALUE}(?:\.\d{{1,9}}|(?:\d{{3}}){{1,3}})?"
              r"(?!\.?\d)"),
    # .NET's JSON dates: \/Date(1795961234567)\/ and /Date(1795961234567+0100)/
    ("epoch", r"\\?/Date\(1\d{12}(?:[+-]\d{4})?\)\\?/"),
    # ULIDs (26 Crockford base-32 characters; a time-ordered ID's first two are "0" and non-zero until 2109)
    # (the pattern starts with the literal "0" so the engine can skip to each one; the look-behind follows)
    ("id", r"0(?<![0-9A-Za-z]0)[1-9A-HJKMNP-TV-Z][0-9A-HJKMNP-TV-Z]{24}(?![0-9A-Za-z])"),
    # AWS X-Ray trace IDs: Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1
    ("id", rf"(?<![\w-])(?:Root=)?1-[{_HEX}]{{8}}-[{_HEX}]{{24}}(?:;Parent=[{_HEX}]{{16}})?(?:;Sampled=[01?])?"
           rf"(?![\w-])"),
    # A clock to the second without a four-digit year: syslog and Go's Stamp (Nov 24 14:03:07), Python
    # logging's %d-%b-%y (24-Nov-26 14:03:07), RFC 850 (Tuesday, 24-Nov-26 14:03:07 GMT), and the klog/glog
    # header of Kubernetes components (I1124 14:03:07.123456)
    ("datetime", rf"{_L}(?:{_MONTHS}\s{{1,2}}{_DD}|(?:{_WEEKDAYS},\s)?{_DD}-{_MONTHS}-\d\d"
                 r"|[IWEF](?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01]))"
                 rf"\s(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{{1,9}})?(?:\s(?:GMT|UTC))?{_R}"),
]

# "Current time: ..." style lines; the value must itself read as a clock (checked below).
_CLOCK_LABEL = re.compile(
    r"(?im)^[ \t]*(?:[-*#>]+[ \t]*)?"
    r"(?P<label>(?:the\s)?(?:current|today'?s|local|system)\s(?:date(?:\sand\stime)?|time(?:stamp)?|datetime)"
    r"|today\sis|it\sis\s(?:now\s)?|now|date(?:\sand\stime)?|time(?:stamp)?|as\sof|当前(?:日期|时间)|今天是|现在(?:时间)?)"
    r"[ \t]*[:=\uff1a-]?[ \t]*(?P<value>[^\n]{1,80}?)[ \t]*[.。]?[ \t]*$"
)
_CLOCK_VALUE = re.compile(
    rf"(?i)^(?:(?:{_WEEKDAYS}|{_MONTHS}|{_CLOCK}|\d{{1,4}}(?:st|nd|rd|th)?|[年月日号]|at|of|the|utc|gmt|z|"
    rf"[+-]\d\d:?\d\d|[a-z]{{2,4}}t|[a-z]+/[a-z_]+)[\s,./:t-]*)+$"
)
# An epoch with no key: a bare number of 10 digits (seconds, a fraction allowed), 13 (ms), 16 (us) or 19 (ns)
# that reads as a moment from September 2001 to May 2033, as the keyed rule reads it. A bare number is as
# likely an order, invoice or account number, and those can fall in the same years, so the words around it
# decide: the words just before it name a moment (generated at, last updated, since, as of, timestamp), or
# those just after say it is Unix time (ms since the epoch, unix time); and no count follows (rows, bytes).
_BARE_EPOCH = re.compile(r"(?<![\w.+/:#$\u20ac\u00a3-])1\d{9}(?:\.\d{1,9}|(?:\d{3}){1,3})?(?![\w/-]|[.,:]\d)")
# The participles are those that label a moment in metadata (Last updated 1795961234567); verbs whose
# object is as often a count or an ID (sent, received, logged, issued) count only with "at" (sent at ...).
_MOMENT_WORD = (
    r"at|since|until|till|as\sof|timestamp|time|date|epoch|now|deadline|expiry|expires|expired|expiring|"
    r"generated|created|updated|modified|changed|published|started|finished|ended|completed|built|deployed|"
    r"synced|refreshed|seen|stamped"
)
_MOMENT_BEFORE = re.compile(
    rf"(?i)(?<![\w-])(?:{_MOMENT_WORD})(?:[ \t]+(?:on|is|was|of))?[ \t]*(?:[:=][ \t]*)?[\"'(\[]?$"
)
_UNIX_TIME_AFTER = re.compile(
    r"(?i)[\"')\]]?[ \t]*\(?(?:(?:ms|us|ns|s|secs?|seconds|millis(?:econds)?|micro(?:second)?s|nano(?:second)?s)"
    r"[ \t]+)?(?:since[ \t]+(?:the[ \t]+)?(?:unix[ \t]+)?epoch|(?:unix|posix|epoch)(?:[ \t]+(?:time|ms|millis))?"
    r"|utc|gmt)\b"
)
_COUNT_AFTER = re.compile(
    r"(?i)[ \t]+(?:times|rows|records|items|entries|bytes|[kmgt]i?b|tokens|users|requests|messages|events|files|"
    r"documents|words|units|copies|points|attempts|retries|dollars|euros|usd|eur)\b|[ \t]*%"
)
_MOMENT_REACH = 32  # how many characters before a number the words that name a moment are sought in

_DIGIT = re.compile(r"\d")
_HAS_CLOCK_FACT = re.compile(rf"\d|(?i:\b{_WEEKDAYS}\b)")


@dataclass(frozen=True, slots=True)
class Span:
    """One volatile piece of text: ``text[start:end]``, with what kind of fact it is."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True, slots=True)
class Detector:
    kind: str
    pattern: re.Pattern[str]


BUILTIN_DETECTORS: tuple[Detector, ...] = tuple(
    Detector(kind, re.compile(source)) for kind, source in (*_DATE_PATTERNS, *_OTHER_PATTERNS)
)


# The kinds a span of the built-in detectors can have ("clock": a labelled clock line; "git_status": an agent
# harness's git snapshot, a section the prompt rewrite finds in a harness block rather than a line's span).
BUILTIN_KINDS: tuple[str, ...] = ("clock", *dict.fromkeys(detector.kind for detector in BUILTIN_DETECTORS),
                                  "git_status")

_YEAR_GATE = re.compile(_YEAR)
_EPOCH_GATE = re.compile(r"1\d{9}")
_SECONDS_GATE = re.compile(r"\d:[0-5]\d:[0-5]\d")


def _has_year(text: str) -> bool:
    return _YEAR_GATE.search(text) is not None


# What each built-in detector cannot match without, checked first: one cheap test in place of the full
# patterns on text that has never been seen (the line cache covers text seen before). One test serves
# each run of detectors that share it, in the order of BUILTIN_DETECTORS: (gate, how many detectors).
_GATES: tuple[tuple[Callable[[str], bool], int], ...] = (
    (_has_year, len(_DATE_PATTERNS)),
    (lambda text: "-" in text, 2),  # traceparent, uuid
    (lambda text: "id" in text.lower(), 1),  # labelled IDs end in "id"
    (lambda text: _EPOCH_GATE.search(text) is not None, 2),  # keyed epochs, .NET JSON dates
    (lambda text: len(text) >= 26, 1),  # ULID
    (lambda text: "1-" in text, 1),  # X-Ray trace ID
    (lambda text: ":" in text and _SECONDS_GATE.search(text) is not None, 1),  # a clock without a year
)


def _gated() -> tuple[tuple[Callable[[str], bool], tuple[Detector, ...]], ...]:
    detectors = iter(BUILTIN_DETECTORS)
    groups = tuple((gate, tuple(next(detectors) for _ in range(count))) for gate, count in _GATES)
    if next(detectors, None) is not None:
        raise RuntimeError("every built-in detector needs its gate in _GATES")
    return groups


_GATED_DETECTORS = _gated()


def custom_detectors(patterns: Sequence[tuple[str, str]]) -> tuple[Detector, ...]:
    """Tenant-configured ``(name, regex)`` pairs; a group named ``value`` narrows the span to it."""
    return tuple(Detector(name, re.compile(source)) for name, source in patterns)


def _clock_lines(text: str) -> list[Span]:
    spans = []
    for match in _CLOCK_LABEL.finditer(text):
        value = match.group("value")
        if _HAS_CLOCK_FACT.search(value) and _CLOCK_VALUE.match(value):
            spans.append(Span(match.start("label"), match.end("value"), "clock"))
    return spans


def _keyless_epochs(text: str) -> list[Span]:
    spans = []
    for match in _BARE_EPOCH.finditer(text):
        start, end = match.span()
        if _COUNT_AFTER.match(text, end):
            continue
        if _MOMENT_BEFORE.search(text, max(0, start - _MOMENT_REACH), start) or _UNIX_TIME_AFTER.match(text, end):
            spans.append(Span(start, end, "epoch"))
    return spans


def find_volatile(text: str, extra: Sequence[Detector] = ()) -> list[Span]:
    """Non-overlapping volatile spans in ``text``, in order; the earliest, then longest, match wins."""
    if not text:
        return []
    found: list[Span] = []
    has_digit = _DIGIT.search(text) is not None  # every built-in detector but "Today is Sunday" needs one
    if has_digit or "day" in text:
        found.extend(_clock_lines(text))
    if has_digit:
        for gate, detectors in _GATED_DETECTORS:
            if gate(text):
                for detector in detectors:
                    found.extend(Span(m.start(), m.end(), detector.kind) for m in detector.pattern.finditer(text))
        if _EPOCH_GATE.search(text):
            found.extend(_keyless_epochs(text))
    for detector in extra:
        for m in detector.pattern.finditer(text):
            start, end = m.span("value") if "value" in detector.pattern.groupindex else m.span()
            if end > start:
                found.append(Span(start, end, detector.kind))
    if len(found) < 2:
        return found
    found.sort(key=lambda span: (span.start, -span.end))
    kept = [found[0]]
    for span in found[1:]:
        if span.start >= kept[-1].end:
            kept.append(span)
    return kept
