"""``Prompt`` keeps each step's body in its own field: a later step reads the latest, and a body no step
changed goes upstream as the bytes the client sent."""

from __future__ import annotations

from proxy.http.prompt import Prompt

RAW = b'{"model": "m",  "messages": [{"role": "user", "content": "hi"}]}'
RECEIVED = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_body_no_step_changed_is_the_one_received() -> None:
    prompt = Prompt(RAW, RECEIVED)
    assert prompt.body is RECEIVED and not prompt.changed


def test_each_stage_is_kept_and_the_latest_is_read() -> None:
    prompt = Prompt(RAW, RECEIVED)
    canonical = {**RECEIVED, "messages": [{"role": "system", "content": "Be brief."}, *RECEIVED["messages"]]}
    prompt.canonical = canonical
    assert prompt.body is canonical and prompt.changed
    admitted = {**canonical, "max_tokens": 64}
    prompt.admitted = admitted
    assert prompt.body is admitted
    assert (prompt.received, prompt.canonical, prompt.retrieved) == (RECEIVED, canonical, None)  # nothing lost


def test_a_responses_turn_reads_its_recalled_conversation_until_a_later_step_changes_it() -> None:
    prompt = Prompt(RAW, RECEIVED)
    recalled = {**RECEIVED, "input": ["earlier", "now"]}
    prompt.recalled = recalled
    assert prompt.body is recalled and prompt.changed
    retrieved = {**recalled, "input": ["earlier", "passages", "now"]}
    prompt.retrieved = retrieved
    assert prompt.body is retrieved
