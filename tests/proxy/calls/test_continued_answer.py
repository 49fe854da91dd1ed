"""``ContinuedAnswer`` joins two legs' events into one answer, fed as an engine sends them: vLLM puts the last
token and the finish reason in one event, holds text back while a stop string may be forming, and a read may
end in the middle of an event."""

from __future__ import annotations

import asyncio

import orjson

from policies.routing.continuation import Cut
from proxy.calls.continued_answer import ContinuedAnswer

DONE = b"data: [DONE]\n\n"


def event(text: str | None, finish: str | None = None, ident: str = "first", *, chat: bool = True,
          stop_reason: str | None = None) -> bytes:
    choice: dict = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"role": "assistant", "content": ""} if text is None else {"content": text}
    else:
        choice["text"] = text or ""
    if stop_reason is not None:
        choice["stop_reason"] = stop_reason
    return b"data: " + orjson.dumps({"id": ident, "created": 1 if ident == "first" else 2, "model": "m",
                                     "choices": [choice]}) + b"\n\n"


def usage(prompt: int, completion: int, ident: str) -> bytes:
    return b"data: " + orjson.dumps({"id": ident, "choices": [], "usage": {
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}) + b"\n\n"


def relay_in_pieces(answer: ContinuedAnswer, stream: bytes, size: int = 7) -> bytes:
    return b"".join(answer.relay(stream[at:at + size]) for at in range(0, len(stream), size))


def run(answer: ContinuedAnswer, first: bytes, second: bytes) -> tuple[list[dict], bool]:
    """Both legs through the tap; the events the client got, and whether it was continued."""
    out = relay_in_pieces(answer, first)
    last, ends = asyncio.run(answer.stream_done())
    out += last
    if not ends:
        answer.long_leg()
        out += relay_in_pieces(answer, second)
        out += asyncio.run(answer.stream_done())[0]
    lines = [line[6:] for line in out.split(b"\n\n") if line.startswith(b"data: ")]
    assert lines[-1] == b"[DONE]" and lines.count(b"[DONE]") == 1
    return [orjson.loads(line) for line in lines[:-1]], not ends


def texts(events: list[dict]) -> str:
    return "".join((e["choices"][0].get("delta") or {}).get("content") or e["choices"][0].get("text") or ""
                   for e in events if e["choices"])


def finishes(events: list[dict]) -> list[str]:
    return [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]]


def test_a_cut_stream_becomes_one_answer_with_one_id_and_summed_usage() -> None:
    answer = ContinuedAnswer(Cut(3, "max_tokens", None), "chat", client_usage=True, stops=())
    first = event(None) + event("a") + event("b") + event("c", "length") + usage(10, 3, "first") + DONE
    second = event(None, ident="second") + event("d", ident="second") + event("e", "stop", "second") \
        + usage(14, 2, "second") + DONE
    events, was_continued = run(answer, first, second)
    assert was_continued and texts(events) == "abcde" and finishes(events) == ["stop"]
    assert {(e["id"], e["created"]) for e in events} == {("first", 1)}
    assert sum("role" in (e["choices"] or [{}])[0].get("delta", {}) for e in events) == 1
    assert events[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert answer.prefilled == 14 and answer.stream_usage(0) == (10, 5)


def test_an_answer_that_ends_within_the_cut_goes_out_as_the_engine_sent_it() -> None:
    answer = ContinuedAnswer(Cut(3, "max_tokens", None), "chat", client_usage=False, stops=())
    first = event(None) + event("a") + event("b", "stop") + usage(10, 2, "first") + DONE
    events, was_continued = run(answer, first, b"")
    assert not was_continued and texts(events) == "ab" and finishes(events) == ["stop"]
    assert all(e["choices"] for e in events)  # the usage event the client did not ask for stays hidden


def test_the_clients_own_cap_reached_at_the_cut_is_not_continued() -> None:
    answer = ContinuedAnswer(Cut(3, "max_tokens", 3), "chat", client_usage=False, stops=())
    events, was_continued = run(answer, event("a") + event("b") + event("c", "length") + usage(1, 3, "f") + DONE,
                                b"")
    assert not was_continued and finishes(events) == ["length"]


def test_a_stop_string_across_the_seam_ends_the_answer_where_it_begins() -> None:
    answer = ContinuedAnswer(Cut(3, "max_tokens", None), "chat", client_usage=False, stops=("END",))
    first = event("x") + event("yE") + event("N", "length") + usage(5, 3, "first") + DONE
    second = event("D and more", ident="second") + event(" text", "length", "second") + DONE
    events, _ = run(answer, first, second)
    assert texts(events) == "xy" and finishes(events) == ["stop"]
    assert answer.cut_off


def test_a_stop_the_continuing_engine_found_itself_ends_the_answer_there_too() -> None:
    answer = ContinuedAnswer(Cut(3, "max_tokens", None), "chat", client_usage=False, stops=("END",))
    first = event("x") + event("yE") + event("N", "length") + usage(5, 3, "first") + DONE
    second = event("", "stop", "second", stop_reason="END") + DONE
    events, _ = run(answer, first, second)
    assert texts(events) == "xy" and finishes(events) == ["stop"]


def test_with_stop_strings_that_do_not_straddle_nothing_is_lost() -> None:
    answer = ContinuedAnswer(Cut(3, "max_tokens", None), "chat", client_usage=False, stops=("ZZZ",))
    first = event("ab") + event("cd") + event("ef", "length") + usage(5, 3, "first") + DONE
    second = event("g", ident="second") + event("h") + event("ij", "length", "second") + DONE
    events, _ = run(answer, first, second)
    assert texts(events) == "abcdefghij" and finishes(events) == ["length"]


def test_completions_are_joined_the_same_way() -> None:
    answer = ContinuedAnswer(Cut(2, "max_tokens", None), "completions", client_usage=False, stops=())
    first = event("Once", chat=False) + event(" upon", "length", chat=False) + usage(3, 2, "first") + DONE
    second = event(" a time", "length", "second", chat=False) + DONE
    events, _ = run(answer, first, second)
    assert texts(events) == "Once upon a time" and finishes(events) == ["length"]
    assert {e["id"] for e in events} == {"first"}


def test_a_cut_json_answer_is_joined_with_summed_usage() -> None:
    answer = ContinuedAnswer(Cut(3, "max_tokens", None), "chat", client_usage=False, stops=())
    first = {"id": "first", "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "abc"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}
    body, _ = asyncio.run(answer.whole(orjson.dumps(first)))
    assert body is None and answer.continuing
    answer.long_leg()
    second = {**first, "id": "second", "choices": [{"index": 0, "message": {"role": "assistant", "content": "de"},
                                                    "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 13, "completion_tokens": 2, "total_tokens": 15}}
    joined, used = asyncio.run(answer.whole(orjson.dumps(second)))
    assert joined is not None
    whole = orjson.loads(joined)
    assert whole["id"] == "first" and whole["choices"][0]["message"]["content"] == "abcde"
    assert whole["choices"][0]["finish_reason"] == "stop" and used == (10, 5)
    assert whole["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _json_leg(ident: str, text: str, finish: str, completion: int) -> bytes:
    return orjson.dumps({"id": ident, "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion}})


def test_a_stop_longer_than_the_short_legs_whole_text_is_found_across_the_seam_in_json_and_stream() -> None:
    """The short leg's text ("abcd") is shorter than what a stop ("cdXYZW") makes it hold back: the stop that
    begins in it and ends in the long leg still ends the answer there, as JSON and as a stream."""
    answer = ContinuedAnswer(Cut(4, "max_tokens", None), "chat", client_usage=False, stops=("cdXYZW",))
    assert asyncio.run(answer.whole(_json_leg("first", "abcd", "length", 4)))[0] is None
    answer.long_leg()
    joined, _ = asyncio.run(answer.whole(_json_leg("second", "XYZW and more", "length", 6)))
    assert joined is not None
    choice = orjson.loads(joined)["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("ab", "stop")

    streamed = ContinuedAnswer(Cut(4, "max_tokens", None), "chat", client_usage=False, stops=("cdXYZW",))
    first = event("ab") + event("cd", "length") + usage(10, 4, "first") + DONE
    second = event("XYZW", ident="second") + event(" and more", "length", "second") + DONE
    events, _ = run(streamed, first, second)
    assert texts(events) == "ab" and finishes(events) == ["stop"]
