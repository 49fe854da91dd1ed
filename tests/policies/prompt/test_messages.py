"""The Messages API's rewrite (``rewrite_messages``) and its render as vLLM's chat (``messages_conversation``)."""

from __future__ import annotations

import json
from typing import Any

from policies.prompt.messages import messages_conversation, rewrite_messages
from policies.prompt.prompt import NOTE_HEADER, PromptPolicy, rewrite_chat

BILLING = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.f85; cc_entrypoint=sdk-cli;"}
ENVIRONMENT = "# Environment\nPrimary working directory: /home/user/project\nToday's date is 2026-11-28."


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Fix it."}], **fields}


def test_the_billing_block_goes_and_each_system_block_keeps_the_line_breaks_at_its_edges() -> None:
    system = [BILLING, {"type": "text", "text": "You are an agent.\n"},
              {"type": "text", "text": "\nBe brief.  \n", "cache_control": {"type": "ephemeral"}}]
    rewrite = rewrite_messages(_body(system=system), PromptPolicy())
    assert rewrite.changed and rewrite.body["system"] == [
        {"type": "text", "text": "You are an agent.\n"},
        {"type": "text", "text": "\nBe brief.\n", "cache_control": {"type": "ephemeral"}}]
    assert messages_conversation(rewrite.body)["messages"][0] == {
        "role": "system", "content": "You are an agent.\n\nBe brief.\n"}  # vLLM joins the blocks with nothing


def test_a_body_without_anything_to_move_is_left_as_it_came() -> None:
    body = _body(system="You are an agent.")
    rewrite = rewrite_messages(body, PromptPolicy())
    assert not rewrite.changed and rewrite.body is body


def test_a_date_in_system_text_after_a_user_turn_ends_that_turn_and_stays_there_in_later_turns() -> None:
    """Claude Code's environment block, a system turn after the first user turn and resent as it was in every
    later turn: its note ends that user turn, so every later turn's prompt starts with this one's, note and all
    (whether vLLM renders the block in place or merges it into the head); a note at the prompt's end would move
    with each turn and take the turns after it out of the cache. The system text's own spans end the last turn."""
    first = [{"role": "user", "content": [{"type": "text", "text": "Fix it."}]},
             {"role": "system", "content": [{"type": "text", "text": ENVIRONMENT}]}]
    note = {"type": "text", "text": f"{NOTE_HEADER}\n[ref 1] = 2026-11-28"}
    rewrite = rewrite_messages(_body(messages=first), PromptPolicy())
    assert rewrite.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Fix it."}, note]},
        {"role": "system", "content": [{"type": "text", "text": ENVIRONMENT.replace("2026-11-28", "[ref 1]")}]}]
    later = [*first, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Now test it."},
             {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Ship it."}]
    for turns in (later[:4], later):
        again = rewrite_messages(_body(messages=turns), PromptPolicy()).body["messages"]
        assert again[:2] == rewrite.body["messages"]
        assert again[2:] == turns[2:]  # nothing at the prompt's end
    clocked = rewrite_messages(_body(system="You are an agent.\nNow: 2026-11-28T09:15:00Z", messages=later),
                               PromptPolicy()).body
    assert clocked["messages"][:2] == rewrite.body["messages"]  # the head's clock ends the last turn, as ever
    assert clocked["messages"][-1]["content"] == f"Ship it.\n\n{NOTE_HEADER}\nNow: 2026-11-28T09:15:00Z"
    assert clocked["system"] == "You are an agent."


def test_a_harness_reminders_date_in_a_user_turn_moves_and_the_users_own_text_stays() -> None:
    reminder = "<system-reminder>\nToday's date is 2026-11-28.\n</system-reminder>\n"
    body = _body(messages=[{"role": "user", "content": [{"type": "text", "text": reminder},
                                                         {"type": "text", "text": "Due 2026-12-01, fix it."}]}])
    content = rewrite_messages(body, PromptPolicy()).body["messages"][0]["content"]
    assert content == [{"type": "text", "text": reminder.replace("2026-11-28", "[ref 1]")},
                       {"type": "text", "text": "Due 2026-12-01, fix it."},
                       {"type": "text", "text": f"{NOTE_HEADER}\n[ref 1] = 2026-11-28"}]


def test_a_chat_with_system_text_after_a_user_turn_gets_the_note_on_that_turn() -> None:
    body = {"messages": [{"role": "user", "content": "Fix it."}, {"role": "system", "content": ENVIRONMENT}]}
    messages = rewrite_chat(body, PromptPolicy()).body["messages"]
    assert messages == [{"role": "user", "content": f"Fix it.\n\n{NOTE_HEADER}\n[ref 1] = 2026-11-28"},
                        {"role": "system", "content": ENVIRONMENT.replace("2026-11-28", "[ref 1]")}]


def test_the_conversation_is_rendered_as_vllm_renders_messages() -> None:
    body = _body(system=[BILLING, {"type": "text", "text": "Agent."}], tools=[
        {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}}], messages=[
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x = 1"},
                                     {"type": "text", "text": "Explain."}]},
        {"role": "system", "content": "Late note."}])
    assert messages_conversation(body) == {"messages": [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "reasoning": "hm", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "Read", "arguments": json.dumps({"path": "a.py"})}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "x = 1"},
        {"role": "user", "content": "Explain."},
        {"role": "system", "content": "Late note."}],
        "tools": [{"type": "function", "function": {"name": "Read", "description": "Read a file.",
                                                    "parameters": {"type": "object"}}}]}


GIT_REMINDER = ("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
                "# gitStatus\nThis is the git status at the start of the conversation.\n\nCurrent branch: main\n\n"
                "Status:\n M calc.py\n\nRecent commits:\n7c50257 Add README and main\nf40b4d5 Add subtraction\n\n"
                "Claude Code attached this context automatically.\n</system-reminder>")
SNAPSHOT = ("# gitStatus\nThis is the git status at the start of the conversation.\n\nCurrent branch: main\n\n"
            "Status:\n M calc.py\n\nRecent commits:\n7c50257 Add README and main\nf40b4d5 Add subtraction")


def test_a_git_snapshot_in_the_system_text_moves_whole_to_the_note_and_one_in_the_first_turn_stays() -> None:
    """A new commit changes an agent's git snapshot. At the end of the system text (Claude Code's earlier layout)
    it would take the tools after it out of the cache with it: moved to the note, a marker in its place. In the
    first turn's reminder (its current layout), after the system text and tools, it stays: each later turn would
    prefill it again in the note."""
    system = [{"type": "text", "text": "You are an agent.\n\n" + SNAPSHOT + "\n"}]
    rewrite = rewrite_messages(_body(system=system), PromptPolicy())
    assert rewrite.body["system"] == [{"type": "text", "text": "You are an agent.\n\n[ref 1]\n"}]
    assert rewrite.body["messages"][-1]["content"] == f"Fix it.\n\n{NOTE_HEADER}\n[ref 1] = {SNAPSHOT}"
    kept = rewrite_messages(_body(system=system), PromptPolicy(actions={"git_status": "keep"}))
    assert SNAPSHOT in kept.body["system"][0]["text"] and kept.moved == 0
    first = {"role": "user", "content": [{"type": "text", "text": GIT_REMINDER}, {"type": "text", "text": "Fix."}]}
    assert not rewrite_messages(_body(messages=[first]), PromptPolicy()).changed


def test_a_tenant_that_strips_git_status_drops_the_snapshot_from_the_first_user_turn_too() -> None:
    """By default Claude Code's git snapshot stays where it put it, in the first user turn; a tenant whose agents
    need no repository state told strips it (``actions: {git_status: strip}``), and a new session's first turn then
    starts as the session before's did."""
    reminder = ("<system-reminder>\nAs you answer, use this context:\n# gitStatus\nThis is the git status.\n\n"
                "Current branch: main\n\nStatus:\n M calc.py\n\nRecent commits:\n7c50257 Add README\n\n"
                "Claude Code attached this context automatically.\n</system-reminder>")
    body = _body(messages=[{"role": "user", "content": [{"type": "text", "text": reminder},
                                                         {"type": "text", "text": "Fix it."}]}])
    kept = rewrite_messages(body, PromptPolicy())
    assert kept.body["messages"] == body["messages"]
    stripped = rewrite_messages(body, PromptPolicy(actions={"git_status": "strip"})).body["messages"][0]["content"]
    assert stripped[0]["text"] == ("<system-reminder>\nAs you answer, use this context:\n\n"
                                   "Claude Code attached this context automatically.\n</system-reminder>")
    assert stripped[1:] == [{"type": "text", "text": "Fix it."}]
