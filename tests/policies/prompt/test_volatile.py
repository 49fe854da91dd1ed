"""Each volatile format is found exactly; ordinary text (prices, versions, phones, code) never is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policies.prompt.volatile import custom_detectors, find_volatile
from tests.support.volatile_formats import FORMATS, samples

# More formats, written out (tests/bench/detector_coverage.py --write-corpus): name -> sought, why, samples
CORPUS = json.loads((Path(__file__).parents[1] / "data" / "volatile_formats.json").read_text())["formats"]

POSITIVE = [
    # (text, the exact span expected, kind)
    ("Generated at 2026-11-22T11:51:13Z by the planner.", "2026-11-22T11:51:13Z", "datetime"),
    ("at 2026-11-22 11:51:13.123456+01:00 we", "2026-11-22 11:51:13.123456+01:00", "datetime"),
    ("compact 20261122 is not, but 2026-11-22T115113Z is", "2026-11-22T115113Z", "datetime"),
    ("Report for 2026-11-22, all regions.", "2026-11-22", "datetime"),
    ("Last-Modified: Sun, 22 Nov 2026 11:51:13 GMT", "Sun, 22 Nov 2026 11:51:13 GMT", "datetime"),
    ("logged 2026/11/22 11:51 by cron", "2026/11/22 11:51", "datetime"),
    ("due 11/22/2026 at the latest", "11/22/2026", "datetime"),
    ("Stand: 22.11.2026, 11:51", "22.11.2026, 11:51", "datetime"),
    ("It is November 22, 2026 in Berlin", "November 22, 2026", "datetime"),
    ("on Sunday, November 22nd 2026, 11:51 AM PST sharp", "Sunday, November 22nd 2026, 11:51 AM PST", "datetime"),
    ("since 22 Nov 2026 only", "22 Nov 2026", "datetime"),
    ("更新于2026年11月22日 11:51。", "2026年11月22日 11:51", "datetime"),
    ("Current time: 2026-11-22T11:51:13.123Z", "Current time: 2026-11-22T11:51:13.123Z", "clock"),
    ("Current date and time: Sunday, 11:51 UTC", "Current date and time: Sunday, 11:51 UTC", "clock"),
    ("Today is Sunday.", "Today is Sunday", "clock"),
    ("- Today's date: 22 November 2026", "Today's date: 22 November 2026", "clock"),
    ("当前日期:2025年5月14日。", "当前日期:2025年5月14日", "clock"),
    ("timestamp: 1795375357", "timestamp: 1795375357", "clock"),
    ('{"ts": 1795375357123, "x": 1}', 'ts": 1795375357123', "epoch"),
    ("epoch=1795375357 seconds", "epoch=1795375357", "epoch"),
    ("user 0f8fad5b-d9cb-469f-a165-70867728950e asked", "0f8fad5b-d9cb-469f-a165-70867728950e", "uuid"),
    ("v7 id 01936f5e-7c4a-7b3e-9f21-3c5d8e9a0b1c here", "01936f5e-7c4a-7b3e-9f21-3c5d8e9a0b1c", "uuid"),
    ("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
     "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "traceparent"),
    ("trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
     "trace_id=4bf92f3577b34da6a3ce929d0e0e4736", "id"),
    ('{"requestId": "req_8ZtQ2xLm9"}', 'requestId": "req_8ZtQ2xLm9', "id"),
    ("Session ID: 9f8e7d6c5b4a", "Session ID: 9f8e7d6c5b4a", "id"),
    ("X-Correlation-ID: 7Hq2Kx9PzR4m", "X-Correlation-ID: 7Hq2Kx9PzR4m", "id"),
    ('{"createdAt": 1795961234567, "n": 1}', 'createdAt": 1795961234567', "epoch"),
    ('{"timeUnixNano": "1795961234123456789"}', 'timeUnixNano": "1795961234123456789', "epoch"),
    ('"ts": "1795961234.123456", "user": "U1"', 'ts": "1795961234.123456', "epoch"),
    ("ends at epoch=1795961234.", "epoch=1795961234", "epoch"),
    ('{"d": "\\/Date(1795961234567)\\/"}', "\\/Date(1795961234567)\\/", "epoch"),
    ("Report generated at 1795961234567 by the planner.", "1795961234567", "epoch"),
    ("Last updated on 1795961234 (nightly sync)", "1795961234", "epoch"),
    ("cache valid since 1795961234567.", "1795961234567", "epoch"),
    ("snapshot 1795961234.123 (unix time)", "1795961234.123", "epoch"),
    ("then 1795961234567 ms since the epoch", "1795961234567", "epoch"),
    ('1.2.3.4 - - [24/Nov/2026:14:03:07 +0100] "GET / HTTP/1.1" 200', "24/Nov/2026:14:03:07 +0100", "datetime"),
    ("Expires=Tue, 24-Nov-2026 14:03:07 GMT; Path=/", "Tue, 24-Nov-2026 14:03:07 GMT", "datetime"),
    ("24-Nov-26 14:03:07 - Admin logged in", "24-Nov-26 14:03:07", "datetime"),
    ("I1124 14:03:07.123456       1 main.go:42] Starting", "I1124 14:03:07.123456", "datetime"),
    ("X-Amz-Date: 20261124T140307Z", "20261124T140307Z", "datetime"),
    ("at 2026-11-24T14:03:07.123+01:00[Europe/Paris] sharp", "2026-11-24T14:03:07.123+01:00[Europe/Paris]", "datetime"),
    ("now 2026-11-24 14:03:07.1 +0000 UTC m=+0.000123456 ok", "2026-11-24 14:03:07.1 +0000 UTC m=+0.000123456",
     "datetime"),
    ("by mx2; Tue, 24 Nov 2026 14:03:07 +0000 (UTC)", "Tue, 24 Nov 2026 14:03:07 +0000 (UTC)", "datetime"),
    ("X-Amzn-Trace-Id: Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
     "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1", "id"),
]


@pytest.mark.parametrize(("text", "expected", "kind"), POSITIVE, ids=[case[1][:32] for case in POSITIVE])
def test_each_format_is_found_exactly(text: str, expected: str, kind: str) -> None:
    spans = find_volatile(text)
    assert [(text[s.start:s.end], s.kind) for s in spans][:1] == [(expected, kind)]


def test_all_spans_of_a_text_in_order_without_overlap() -> None:
    text = "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7 at 2026-11-22 11:51"
    found = [text[s.start:s.end] for s in find_volatile(text)]
    assert found == ["trace_id=4bf92f3577b34da6a3ce929d0e0e4736", "span_id=00f067aa0ba902b7", "2026-11-22 11:51"]


def test_negative_corpus_has_no_detections() -> None:
    corpus = (Path(__file__).parents[1] / "data" / "negative_corpus.txt").read_text().splitlines()
    assert len(corpus) >= 200
    flagged = {line: [line[s.start:s.end] for s in find_volatile(line)] for line in corpus if find_volatile(line)}
    assert flagged == {}


@pytest.mark.parametrize("text", [
    "2026-13-22", "2026-11-32", "1850-01-01", "13/45/2026", "version 2.11.2026-rc1", "call 555-11-2026x",
    "Time is money.", "Today is a good day to learn.", "request_id: unknown", "ts=12345",
    '{"timeout": 1800000000}', '{"format": 1795961234}', "order 1795961234567 shipped", "ts=17959612345",
    "24-Nov-26", "I1124 14:03", "00:01:02.500 --> 00:01:05.000", "1-800-555-0199", "20261124T1403",
    "updated 1795961234567 rows", "Ticket created #1795961234", "generated at 17959612345",
    "generated at 2795961234567", "outdated 1795961234567", "at 1500000000 requests per second",
    "21795961234567 ms since the epoch", "order #1795961234567 UTC",
])
def test_near_misses_are_not_volatile(text: str) -> None:
    assert find_volatile(text) == []


def test_tenant_patterns_with_and_without_a_value_group() -> None:
    detectors = custom_detectors([("ticket", r"TICKET-\d+"), ("build", r"build=(?P<value>[0-9a-f]{7})")])
    text = "Working on TICKET-4521 for build=a1b2c3d today."
    found = [(text[s.start:s.end], s.kind) for s in find_volatile(text, detectors)]
    assert found == [("TICKET-4521", "ticket"), ("a1b2c3d", "build")]


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_real_world_format_is_found_whole_or_left_alone_as_meant(name: str) -> None:
    """Every line of a sought format has its whole value in one span; a format left alone on purpose (a
    bare number or random string, which looks like much that is not volatile) is never touched."""
    sought = FORMATS[name][2]
    for line, value in samples(name):
        start = line.index(value)
        covered = any(s.start <= start and s.end >= start + len(value) for s in find_volatile(line))
        assert covered == sought, (line, [line[s.start:s.end] for s in find_volatile(line)])


@pytest.mark.parametrize("name", list(CORPUS))
def test_each_format_of_the_corpus_file_is_found_whole_or_left_alone_as_meant(name: str) -> None:
    """The same for the formats of tests/policies/data/volatile_formats.json; one left alone says why."""
    entry = CORPUS[name]
    assert entry["sought"] or entry["why"]
    assert len(entry["samples"]) >= 5
    for sample in entry["samples"]:
        line, value = sample["line"], sample["value"]
        start = line.index(value)
        covered = any(s.start <= start and s.end >= start + len(value) for s in find_volatile(line))
        assert covered == entry["sought"], (line, [line[s.start:s.end] for s in find_volatile(line)])
