"""Tenant templates: near-identical system preambles become one canonical preamble plus a note."""

from __future__ import annotations

import unicodedata
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.prompt.prompt import NOTE_HEADER, PromptPolicy, rewrite_chat
from policies.prompt.templates import compile_template
from tests.support.chat_body import chat_body

SUPPORT = compile_template("support", "You are {agent}, the support agent of {company}.\nAnswer in {language}.\n")
POLICY = PromptPolicy(templates=(SUPPORT,))
REST = "Never promise refunds.\nKeep answers short."
chat = partial(chat_body, user_text="Hi")


def test_variants_share_one_canonical_preamble_and_keep_their_values_in_the_note() -> None:
    first = rewrite_chat(chat(f"You are Max, the support agent of ACME.\nAnswer in English.\n{REST}"), POLICY)
    second = rewrite_chat(chat(f"You are  Sam Lee, the support agent\nof Globex GmbH.\r\nAnswer in German. \n{REST}"),
                          POLICY)
    canonical = f"You are [agent], the support agent of [company].\nAnswer in [language].\n{REST}"
    assert first.body["messages"][0]["content"] == second.body["messages"][0]["content"] == canonical
    assert second.body["messages"][1]["content"] == (
        f"Hi\n\n{NOTE_HEADER}\n[agent] = Sam Lee\n[company] = Globex GmbH\n[language] = German")
    assert (first.templated, second.templated) == (1, 1)


def test_volatile_facts_come_first_in_the_note_and_a_second_pass_changes_nothing() -> None:
    once = rewrite_chat(chat("Current time: 2026-11-22 11:51 UTC\nYou are Max, the support agent of ACME.\n"
                             "Answer in English."), POLICY)
    assert once.body["messages"][1]["content"].endswith(
        "Current time: 2026-11-22 11:51 UTC\n[agent] = Max\n[company] = ACME\n[language] = English")
    assert rewrite_chat(once.body, POLICY).body == once.body


def test_no_match_leaves_the_message_alone() -> None:
    body = chat("You are Max. Answer in English.")
    result = rewrite_chat(body, POLICY)
    assert (result.changed, result.templated) == (False, 0)


def test_a_repeated_variable_must_repeat_its_value() -> None:
    template = compile_template("t", "{name} helps. Ask {name}.")
    policy = PromptPolicy(templates=(template,))
    assert rewrite_chat(chat("Max helps. Ask Max."), policy).templated == 1
    assert rewrite_chat(chat("Max helps. Ask Sam."), policy).templated == 0


@pytest.mark.parametrize("text, problem", [
    ("Hello {0}", "not a plain {name} variable"),
    ("Hello {name!r}", "not a plain {name} variable"),
    ("Hello {name:>5}", "not a plain {name} variable"),
    ("Hello {name", "expected '}'"),
    ("{a} {b}", "needs some fixed text"),
])
def test_malformed_templates_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"template 'x': .*{problem[:20]}".replace("{", r"\{").replace("(", r"\(")):
        compile_template("x", text)


_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Nd"), blacklist_characters=_LINE_BREAKS + ",."),
               min_size=1, max_size=30).filter(lambda s: s.strip() == s and s))
def test_any_single_line_value_round_trips_through_the_note(value: str) -> None:
    result = rewrite_chat(chat(f"You are {value}, the support agent of ACME.\nAnswer in English."), POLICY)
    assert f"[agent] = {unicodedata.normalize('NFC', value)}" in result.body["messages"][1]["content"]
