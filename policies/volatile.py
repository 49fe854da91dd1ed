"""Find volatile spans (clock readings, dates, UUIDs, trace and request IDs) in prompt text.

vLLM's prefix cache hashes KV blocks in a chain from the first token, so one timestamp near the
top of a prompt makes every later block miss. These detectors find such spans so the prompt
policy can move them to the tail. They are tuned against false positives: a pattern must look
like a calendar date or clock reading with valid field ranges, or carry a label (``trace_id=``,
``Current time:``), before it counts; version numbers, prices, phone numbers and code do not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
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
# Z, UTC, +01:00; JavaScript's "GMT+0100 (Central European Standard Time)"; Go's "+0000 UTC"; CET, PDT
_ZONE = (rf"(?:\s?(?:(?:UTC|GMT){_OFFSET}(?:\s\([A-Z][A-Za-z .]{{2,60}}\))?"
         rf"|(?:Z|UTC|GMT|{_OFFSET}(?:\s[A-Z]{{2,5}})?|[A-Z][A-Z]?[SD]?T)\b))")
_CLOCK = rf"(?:(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d{{1,9}})?)?(?:\s?[AaPp]\.?[Mm]\.?)?{_ZONE}?)"
_TIME_AFTER = rf"(?:(?:[T ]|,?\s(?:at\s)?){_CLOCK})?"
# Letters, digits or a joining dot/dash/slash on either side mean the match is part of a bigger token.
_L = r"(?<![\w./:-])"
_R = r"(?![\w/:-]|\.\d)"

_DATE_PATTERNS: list[tuple[str, str]] = [
    # ISO 8601 (2026-11-22, 2026-11-22T11:51:13.123Z, 2026-11-22 11:51+01:00) and 2026/11/22 11:51
    ("datetime", rf"{_L}{_YEAR}([-/]){_MM}\1{_DD}(?:[T ]{_CLOCK}|T(?:[01]\d|2[0-3])[0-5]\d[0-5]\d{_ZONE}?)?{_R}"),
    # RFC 2822 / HTTP dates: Sun, 22 Nov 2026 11:51:13 GMT
    ("datetime", rf"{_L}{_WEEKDAYS},?\s{_DD}\s{_MONTHS}\s{_YEAR}(?:\s{_CLOCK})?{_R}"),
    # 11/22/2026, 22.11.2026, 22-11-2026 (US and European numeric orders), optional time
    ("datetime", rf"{_L}(?:{_MM}/{_DD}/{_YEAR}|{_DD}/{_MM}/{_YEAR}|{_DD}\.{_MM}\.{_YEAR}|{_DD}-{_MM}-{_YEAR})"
                 rf"{_TIME_AFTER}{_R}"),
    # November 22, 2026 / Sunday, November 22nd 2026, 11:51 AM / 22 November 2026
    ("datetime", rf"{_L}(?:{_WEEKDAYS},?\s)?{_MONTHS}\.?\s{_DD}(?:st|nd|rd|th)?,?\s{_YEAR}{_TIME_AFTER}{_R}"),
    ("datetime", rf"{_L}(?:{_WEEKDAYS},?\s)?{_DD}(?:st|nd|rd|th)?\s{_MONTHS}\.?,?\s{_YEAR}{_TIME_AFTER}{_R}"),
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
_OTHER_PATTERNS: list[tuple[str, str]] = [
    # W3C traceparent: version-traceid-parentid-flags
    ("traceparent", rf"(?:\btraceparent[\"']?\s*[:=]\s*[\"']?)?(?<![{_HEX}-])[{_HEX}]{{2}}-[{_HEX}]{{32}}-"
                    rf"[{_HEX}]{{16}}-[{_HEX}]{{2}}(?![{_HEX}-])"),
    # RFC 9562 UUIDs, versions 1-8
    ("uuid", rf"(?<![{_HEX}-])[{_HEX}]{{8}}-[{_HEX}]{{4}}-[1-8][{_HEX}]{{3}}-[89abAB][{_HEX}]{{3}}-[{_HEX}]{{12}}"
             rf"(?![{_HEX}-])"),
    # Labelled IDs: trace_id=4bf92f35..., "requestId": "req_8ZtQ2...", Session ID: 9f8e7d6c5b4a
    ("id", rf"(?i:\b{_ID_LABEL})[\"']?\s*[:=]\s*[\"']?(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{{8,}}(?![A-Za-z0-9_-])"),
    # Labelled Unix epoch seconds (10 digits), milliseconds (13) or microseconds (16)
    ("epoch", r"(?i:\b(?:timestamp|unix[-_ ]?time|epoch|ts|created(?:_at)?|now|time))[\"']?\s*[:=]\s*[\"']?"
              r"1\d{9}(?:\d{3}){0,2}(?![\d.])"),
    # ULIDs (26 Crockford base-32 characters; a time-ordered ID's first two are "0" and non-zero until 2109)
    # (the pattern starts with the literal "0" so the engine can skip to each one; the look-behind follows)
    ("id", r"0(?<![0-9A-Za-z]0)[1-9A-HJKMNP-TV-Z][0-9A-HJKMNP-TV-Z]{24}(?![0-9A-Za-z])"),
    # syslog and Go's Stamp, a clock to the second without a year: Nov 24 14:03:07
    ("datetime", rf"{_L}{_MONTHS}\s{{1,2}}{_DD}\s(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{{1,9}})?{_R}"),
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


# The kinds a span of the built-in detectors can have ("clock": a labelled clock line).
BUILTIN_KINDS: tuple[str, ...] = ("clock", *dict.fromkeys(detector.kind for detector in BUILTIN_DETECTORS))

_YEAR_GATE = re.compile(_YEAR)
_EPOCH_GATE = re.compile(r"1\d{9}")
_SECONDS_GATE = re.compile(r"\d:[0-5]\d:[0-5]\d")


def _has_year(text: str) -> bool:
    return _YEAR_GATE.search(text) is not None


# What each built-in detector cannot match without, checked first: one cheap test in place of a
# full pattern on text that has never been seen (the line cache covers text seen before).
_GATES = (
    *([_has_year] * len(_DATE_PATTERNS)),
    lambda text: "-" in text,  # traceparent
    lambda text: "-" in text,  # uuid
    lambda text: "id" in text.lower(),  # labelled IDs end in "id"
    lambda text: _EPOCH_GATE.search(text) is not None,
    lambda text: len(text) >= 26,  # ULID
    lambda text: ":" in text and _SECONDS_GATE.search(text) is not None,  # syslog stamp
)
_GATED_DETECTORS = tuple(zip(_GATES, BUILTIN_DETECTORS, strict=True))


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


def find_volatile(text: str, extra: Sequence[Detector] = ()) -> list[Span]:
    """Non-overlapping volatile spans in ``text``, in order; the earliest, then longest, match wins."""
    if not text:
        return []
    found: list[Span] = []
    has_digit = _DIGIT.search(text) is not None  # every built-in detector but "Today is Sunday" needs one
    if has_digit or "day" in text:
        found.extend(_clock_lines(text))
    if has_digit:
        for gate, detector in _GATED_DETECTORS:
            if gate(text):
                found.extend(Span(m.start(), m.end(), detector.kind) for m in detector.pattern.finditer(text))
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
