"""Reading usage from a stream's bytes, and hiding the usage event a client did not ask for."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from policies.answers.usage import HELD_EVENT_LIMIT, hide_usage_events, usage_in

CONTENT = [b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"%d"}}]}\n\n' % i for i in range(5)]
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}\n\n'
DONE = b"data: [DONE]\n\n"
STREAM = b"".join(CONTENT) + USAGE + DONE


def relayed(pieces: list[bytes]) -> bytes:
    """What a client receives when the stream arrives in ``pieces``: each piece filtered with what was held."""
    out, held = [], b""
    for piece in pieces:
        ready, held = hide_usage_events(held + piece)
        out.append(ready)
    return b"".join(out) + held


@given(st.lists(st.integers(1, len(STREAM) - 1), max_size=12, unique=True))
def test_the_usage_event_is_hidden_wherever_the_stream_is_cut(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in pairwise(bounds)]
    assert relayed(pieces) == b"".join(CONTENT) + DONE  # every other byte as sent, in order
    assert usage_in(b"".join(pieces)) == (12, 5)  # the gateway still reads it from the bytes it got


def test_whole_events_go_out_at_once_and_a_partial_one_waits_for_its_end() -> None:
    assert hide_usage_events(CONTENT[0]) == (CONTENT[0], b"")
    assert hide_usage_events(CONTENT[0] + CONTENT[1][:10]) == (CONTENT[0], CONTENT[1][:10])


def test_crlf_framed_streams_are_filtered_too() -> None:
    crlf = STREAM.replace(b"\n\n", b"\r\n\r\n")
    assert relayed([crlf]) == (b"".join(CONTENT) + DONE).replace(b"\n\n", b"\r\n\r\n")


def test_bytes_that_never_end_an_event_are_passed_on_rather_than_piled_up() -> None:
    endless = b"x" * (HELD_EVENT_LIMIT + 1)
    assert hide_usage_events(endless) == (endless, b"")
    assert hide_usage_events(endless[:100]) == (b"", endless[:100])


def test_a_content_event_with_empty_choices_but_no_usage_is_kept() -> None:
    odd = b'data: {"id":"c","choices":[]}\n\n'
    assert relayed([odd + USAGE + DONE]) == odd + DONE
