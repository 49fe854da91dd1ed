"""The prompt rewrite: canonical system text, volatile spans moved to one tail note, tools sorted on request."""

from __future__ import annotations

from functools import partial

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.prompt.prompt import NOTE_HEADER, PromptPolicy, rewrite_chat
from tests.support.chat_body import chat_body

SYSTEM = (
    "You are the ACME support agent.\nCurrent time: 2026-11-22 11:51:13 UTC\n"
    "trace_id=4bf92f3577b34da6a3ce929d0e0e4736\n\nBe brief."
)
chat = partial(chat_body, user_text="Where is my order?")


def test_labelled_lines_move_to_a_note_after_the_last_user_message() -> None:
    body = chat(SYSTEM)
    result = rewrite_chat(body, PromptPolicy())
    system, user = result.body["messages"]
    assert system["content"] == "You are the ACME support agent.\n\nBe brief."
    assert user["content"] == (
        "Where is my order?\n\n" + NOTE_HEADER + "\nCurrent time: 2026-11-22 11:51:13 UTC"
        "\ntrace_id=4bf92f3577b34da6a3ce929d0e0e4736"
    )
    assert (result.changed, result.detected, result.moved) == (True, 2, 2)
    assert body == chat(SYSTEM)  # the input is untouched


def test_inline_spans_leave_a_numbered_marker() -> None:
    system = "Prices as of [2026-11-22 11:51], in EUR. Request 0f8fad5b-d9cb-469f-a165-70867728950e."
    result = rewrite_chat(chat(system), PromptPolicy())
    assert result.body["messages"][0]["content"] == "Prices as of [ref 1], in EUR. Request [ref 2]."
    assert result.body["messages"][1]["content"].endswith(
        "[ref 1] = [2026-11-22 11:51]\n[ref 2] = 0f8fad5b-d9cb-469f-a165-70867728950e")


def test_strip_drops_and_keep_counts() -> None:
    stripped = rewrite_chat(chat(SYSTEM), PromptPolicy(volatile="strip"))
    assert stripped.body["messages"][0]["content"] == "You are the ACME support agent.\n\nBe brief."
    assert stripped.body["messages"][1]["content"] == "Where is my order?"
    kept = rewrite_chat(chat(SYSTEM), PromptPolicy(volatile="keep", canonical=False))
    assert (kept.changed, kept.detected, kept.moved) == (False, 2, 0)
    assert kept.body == chat(SYSTEM)


def test_a_kind_can_have_its_own_action() -> None:
    ids_stripped = rewrite_chat(chat(SYSTEM), PromptPolicy(actions={"id": "strip"}))
    system, user = ids_stripped.body["messages"]
    assert system["content"] == "You are the ACME support agent.\n\nBe brief."
    assert user["content"] == "Where is my order?\n\n" + NOTE_HEADER + "\nCurrent time: 2026-11-22 11:51:13 UTC"
    assert (ids_stripped.detected, ids_stripped.moved) == (2, 2)

    clock_kept = rewrite_chat(chat(SYSTEM), PromptPolicy(actions={"clock": "keep"}))
    system, user = clock_kept.body["messages"]
    assert system["content"] == "You are the ACME support agent.\nCurrent time: 2026-11-22 11:51:13 UTC\n\nBe brief."
    assert user["content"].endswith(NOTE_HEADER + "\ntrace_id=4bf92f3577b34da6a3ce929d0e0e4736")
    assert (clock_kept.detected, clock_kept.moved) == (2, 1)

    only_ids_move = rewrite_chat(chat(SYSTEM), PromptPolicy(volatile="keep", actions={"id": "relocate"}))
    assert only_ids_move.body["messages"][0]["content"].startswith(
        "You are the ACME support agent.\nCurrent time: 2026-11-22 11:51:13 UTC\n")
    assert only_ids_move.body["messages"][1]["content"].endswith("\ntrace_id=4bf92f3577b34da6a3ce929d0e0e4736")


def test_inline_spans_of_a_stripped_kind_leave_no_marker() -> None:
    system = "Prices as of [2026-11-22 11:51], in EUR. Request 0f8fad5b-d9cb-469f-a165-70867728950e."
    result = rewrite_chat(chat(system), PromptPolicy(actions={"uuid": "strip"}))
    assert result.body["messages"][0]["content"] == "Prices as of [ref 1], in EUR. Request ."
    assert result.body["messages"][1]["content"].endswith(NOTE_HEADER + "\n[ref 1] = [2026-11-22 11:51]")


def test_note_as_final_system_message_and_history_scope() -> None:
    body = {"model": "m", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "[2026-11-22 11:51:13] Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "[2026-11-22 11:52:40] Bye"},
    ]}
    assert rewrite_chat(body, PromptPolicy()).changed is False  # user turns are not touched by default
    result = rewrite_chat(body, PromptPolicy(scope="history", note="system_message"))
    messages = result.body["messages"]
    assert messages[1]["content"] == "[ref 1] Hi"
    assert messages[3]["content"] == "[2026-11-22 11:52:40] Bye"  # the last user turn is the tail already
    assert messages[4] == {"role": "system", "content": NOTE_HEADER + "\n[ref 1] = [2026-11-22 11:51:13]"}
    assert rewrite_chat(result.body, PromptPolicy(scope="history", note="system_message")).body == result.body


def test_history_scopes_spans_go_to_the_prompts_end_and_a_harness_blocks_stay_with_their_turn() -> None:
    """``scope: history`` is for apps that render their history anew on every request (a fresh ID, a relative
    time), so its spans go to the note at the prompt's end; an agent harness's block in an earlier turn is resent
    as it was, so its note ends that turn, where it stays from one turn to the next."""
    reminder = "<system-reminder>\nToday's date is 2026-11-28.\n</system-reminder>\n"
    body = {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": reminder}, {"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "Hello! request_id=4bf92f3577b34da6a3ce929d0e0e4736"},
        {"role": "user", "content": "Bye"},
    ]}
    messages = rewrite_chat(body, PromptPolicy(scope="history")).body["messages"]
    assert messages[0]["content"] == [
        {"type": "text", "text": reminder.replace("2026-11-28", "[ref 1]")}, {"type": "text", "text": "Hi"},
        {"type": "text", "text": f"{NOTE_HEADER}\n[ref 1] = 2026-11-28"}]
    assert messages[1]["content"] == "Hello! [ref 2]"
    assert messages[2]["content"] == f"Bye\n\n{NOTE_HEADER}\n[ref 2] = request_id=4bf92f3577b34da6a3ce929d0e0e4736"


def test_content_parts_are_rewritten_text_part_by_text_part() -> None:
    body = {"model": "m", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Today is Sunday.\nBe brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": "x"}}]},
    ]}
    messages = rewrite_chat(body, PromptPolicy()).body["messages"]
    assert messages[0]["content"] == [{"type": "text", "text": "Be brief."}]
    assert messages[1]["content"][-1] == {"type": "text", "text": NOTE_HEADER + "\nToday is Sunday"}


TOOLS = [{"type": "function", "function": {"name": "zeta", "parameters": {
              "type": "object", "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string"}}}}},
         {"function": {"name": "alpha", "description": "d"}, "type": "function"}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "s", "schema": {
    "type": "object", "required": ["reasoning", "answer"],
    "properties": {"reasoning": {"type": "string"}, "answer": {"type": "object", "properties": {"z": {}, "a": {}}}}}}}


def test_canonical_system_text_leaves_tools_and_schemas_as_sent() -> None:
    """Only system text changes: tools and schemas are what the template and guided decoding read in order."""
    result = rewrite_chat(chat("Cafe\u0301 rules  \r\n\r\n\r\n\r\nBe brief.\t\n", tools=TOOLS,
                               response_format=SCHEMA, functions=TOOLS), PromptPolicy())
    assert result.body["messages"][0]["content"] == "Caf\u00e9 rules\n\nBe brief."
    for key, sent in (("tools", TOOLS), ("functions", TOOLS), ("response_format", SCHEMA)):
        assert orjson.dumps(result.body[key]) == orjson.dumps(sent)  # key order too, at every depth
    assert rewrite_chat(chat("Be brief.", tools=TOOLS, response_format=SCHEMA), PromptPolicy()).changed is False


def test_sort_tools_sorts_the_list_and_keys_but_keeps_each_schemas_property_order() -> None:
    nested = {"type": "function", "function": {"parameters": {"type": "object", "properties": {
        "properties": {"type": "object", "properties": {"y": {"type": "string"}, "b": {"type": "string"}}},
        "answer": {"type": "string", "description": "d"}}}, "name": "mid"}}
    result = rewrite_chat(chat("Be brief.", tools=[*TOOLS, nested], response_format=SCHEMA),
                          PromptPolicy(sort_tools=True))
    tools = result.body["tools"]
    assert [t["function"]["name"] for t in tools] == ["alpha", "mid", "zeta"]
    assert list(tools[0]) == ["function", "type"] and list(tools[1]["function"]) == ["name", "parameters"]
    assert list(tools[2]["function"]["parameters"]["properties"]) == ["reasoning", "answer"]
    properties = tools[1]["function"]["parameters"]["properties"]
    assert list(properties) == ["properties", "answer"]  # a property's name is not a keyword
    assert list(properties["properties"]) == ["properties", "type"]  # its own schema's keys are sorted...
    assert list(properties["properties"]["properties"]) == ["y", "b"]  # ...and its properties keep their order
    assert list(properties["answer"]) == ["description", "type"]
    assert orjson.dumps(result.body["response_format"]) == orjson.dumps(SCHEMA)  # never reordered


def test_user_text_is_never_canonicalized() -> None:
    body = chat("Be brief.", user_text="Keep   my\r\nspacing  ")
    assert rewrite_chat(body, PromptPolicy()).changed is False


# ---- properties ----

words = st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "Zs"]), max_size=40)
stamps = st.builds(
    lambda y, mo, d, h, mi: f"{y}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}",
    st.integers(2000, 2099), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
)
ids = st.uuids(version=4).map(str)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(words, stamps.map(lambda s: f"Current time: {s}"), ids), max_size=8), words)
def test_rewrite_is_idempotent(lines: list[str], user: str) -> None:
    once = rewrite_chat(chat("\r\n".join(lines) + " \n\n\n", user_text=user), PromptPolicy())
    twice = rewrite_chat(once.body, PromptPolicy())
    assert twice.body == once.body


@settings(max_examples=150, deadline=None)
@given(st.lists(
    st.one_of(words.map(lambda w: (w, False)), stamps.map(lambda s: (s, True)), ids.map(lambda i: (i, True))),
    min_size=1, max_size=8,
))
def test_every_moved_span_is_in_the_note_in_order(parts: list[tuple[str, bool]]) -> None:
    volatile = [text for text, is_volatile in parts if is_volatile]
    result = rewrite_chat(chat("Header.\n" + "\n".join(text for text, _ in parts)), PromptPolicy())
    note = result.body["messages"][-1]["content"].split(NOTE_HEADER, 1)[-1]
    cursor = 0
    for value in volatile:  # each one present, after the one before it
        cursor = note.find(value, cursor)
        assert cursor >= 0, (value, note)
        cursor += len(value)


@settings(max_examples=100, deadline=None)
@given(stamps, stamps, ids, ids, words)
def test_prompts_differing_only_in_volatile_spans_share_the_prefix(t1: str, t2: str, i1: str, i2: str, w: str) -> None:
    def system(stamp: str, trace: str) -> str:
        return f"You are an agent. {w}\nCurrent time: {stamp}\nrequest_id={trace.replace('-', '')}\nUse the tools."

    first = rewrite_chat(chat(system(t1, i1)), PromptPolicy()).body["messages"][0]
    second = rewrite_chat(chat(system(t2, i2)), PromptPolicy()).body["messages"][0]
    assert first == second


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(words.map(lambda w: (w, None)), stamps.map(lambda s: (s, "datetime")),
                       ids.map(lambda i: (i, "uuid"))), min_size=1, max_size=8),
    st.sampled_from(["relocate", "strip", "keep"]), st.sampled_from(["relocate", "strip", "keep"]),
)
def test_each_kind_gets_its_own_action(parts: list[tuple[str, str | None]], dates: str, uuids: str) -> None:
    actions = {"datetime": dates, "uuid": uuids}
    result = rewrite_chat(chat("Header.\n" + "\n".join(text for text, _ in parts)),
                          PromptPolicy(volatile="keep", actions=actions))  # type: ignore[arg-type]
    system = result.body["messages"][0]["content"]
    note = result.body["messages"][-1]["content"].partition(NOTE_HEADER)[2]
    for text, kind in parts:
        if kind is not None:
            where = {"keep": (system, ""), "relocate": (note, system), "strip": ("", system + note)}[actions[kind]]
            assert text in where[0] or not where[0], (text, actions[kind])
            assert text not in where[1], (text, actions[kind])
