"""What a coding agent's harness adds to a prompt, as the rewrite reads it.

Agents put context of their own in user turns: Claude Code's ``<system-reminder>`` blocks and Codex's
``<environment_context>`` (the working directory, today's date). That text is the harness's, not the user's, so
its volatile spans are read as system text's are, and the user's own words after it are left alone. Claude Code
also writes a snapshot of the repository (``gitStatus``: branch, status, recent commits), new with every commit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from policies.prompt.message_text import is_text_part

HARNESS_BLOCKS = (("<system-reminder>", "</system-reminder>"), ("<environment_context>", "</environment_context>"))
_OPENINGS = tuple(opening for opening, _ in HARNESS_BLOCKS)
# A coding agent's git snapshot (Claude Code's gitStatus): a heading, the branch and status, then its recent
# commits, to the blank line after them (what follows is the harness's own fixed text).
GIT_SNAPSHOT = re.compile(r"^(?:# gitStatus|gitStatus:)[^\n]*\n(?:[^\n]*\n)*?Recent commits:\n(?:[^\n]+\n?)*",
                          re.MULTILINE)


def has_harness_block(content: Any) -> bool:
    """Whether a user turn's content (a string or parts) opens a part with a harness block."""
    if isinstance(content, str):
        return content.startswith(_OPENINGS)
    if isinstance(content, list):
        return any(is_text_part(part) and part["text"].startswith(_OPENINGS) for part in content)
    return False


def in_harness_block(harness: Callable[[str], str], rest: Callable[[str], str] | None, text: str) -> str:
    """A harness block that opens ``text`` (to its closing tag) through ``harness``; the rest of the text through
    ``rest`` (the history's rule), or as it was."""
    for opening, closing in HARNESS_BLOCKS:
        if text.startswith(opening):
            end = text.find(closing)
            end = len(text) if end < 0 else end + len(closing)
            tail = text[end:]
            return harness(text[:end]) + (rest(tail) if rest is not None and tail else tail)
    return rest(text) if rest is not None else text
