"""The one owner of what goes to a client (``ClientAnswer``): one failure has one code whether or not the
status line went out, the steps' headers go on every answer, and nothing follows a whole answer."""

from __future__ import annotations

import orjson
from starlette.types import Message

from policies.refusals import Shed, UpstreamFailed
from proxy.wire.answer import ClientAnswer
from proxy.wire.headers import ResponseHeaders

STEPS = ((b"x-prefixgate-volatile", b"2"), (b"x-prefixgate-passages", b"3"))


def _answer() -> tuple[ClientAnswer, list[Message]]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    headers = ResponseHeaders()
    headers += STEPS
    return ClientAnswer(send, headers), sent


async def test_a_failure_has_one_code_before_and_after_the_status_line() -> None:
    """An unreachable pool is ``upstream_unreachable`` as a 502's JSON and as the last event of a stream whose
    status line a keep-alive sent; the stream is recorded with the 502 it ended with."""
    fresh, sent = _answer()
    await fresh.fail(UpstreamFailed("p", "unreachable"))
    start, body = sent
    assert start["status"] == 502 == fresh.status
    as_json = orjson.loads(body["body"])["error"]
    assert set(STEPS) <= set(start["headers"]) and (b"retry-after", b"1") in start["headers"]

    streamed, sent = _answer()
    await streamed._beat(b": keep-alive\n\n")
    await streamed.fail(UpstreamFailed("p", "unreachable"))
    head, comment, last = sent
    assert head["status"] == 200 and set(STEPS) <= set(head["headers"]) and comment["more_body"]
    event = orjson.loads(last["body"].removeprefix(b"data: "))["error"]
    assert event["code"] == as_json["code"] == "upstream_unreachable" and event["type"] == as_json["type"]
    assert not last["more_body"] and streamed.status == 502 and streamed.finished


async def test_a_stream_that_opened_keeps_its_200_and_nothing_follows_a_whole_answer() -> None:
    answer, sent = _answer()
    await answer.open_stream()
    await answer.event(b"data: {}\n\n")
    await answer.fail(Shed("p", "queue_full", 1.0))
    assert answer.status == 200 and [m.get("more_body") for m in sent[1:]] == [True, False]
    done, sent = _answer()
    await done.whole(200, b"application/json", b"{}")
    await done.fail(Shed("p", "queue_full", 1.0))
    assert len(sent) == 2 and done.status == 200
