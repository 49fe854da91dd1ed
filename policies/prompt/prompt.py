"""Rewrite a chat request so its prompt prefix is the same from one request to the next.

System text gets one canonical form; volatile spans (clock readings, dates, IDs) in system messages,
and in earlier turns when configured, are moved to one note at the end of the prompt, where a
changing value costs one short tail instead of the whole prefill. Nothing is lost unless the policy
says strip (for every span, or for one kind, such as IDs the model has no use for): each moved span
appears in the note, in its original order, and an inline span leaves a ``[ref N]`` marker at its
place so the model can connect them.
Everything else reaches the engine as the app sent it: tools, schemas and turns are what the chat
template and guided decoding read, in order, so changing them could change the answer. Sorting the
tool list is a tenant's choice (``sort_tools``), off by default.
Pure: a request body in, a new body out; the input is never mutated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from policies.prompt.canonical import canonical_line, sorted_tools
from policies.prompt.lines import LineScanner, ScannedLine
from policies.prompt.message_text import is_text_part, text_part
from policies.prompt.templates import Template, apply_template
from policies.prompt.volatile import Span

VolatileAction = Literal["relocate", "strip", "keep"]
# Short on purpose: it is prefilled on every request (12 tokens with the tiny model, down from 27).
NOTE_HEADER = "[Request context from earlier in the prompt]"
_SYSTEM_ROLES = frozenset({"system", "developer"})
_HISTORY_ROLES = frozenset({"user", "assistant"})
_BULLETS = " \t-*#>•"
_LINE_END_PUNCTUATION = " \t\r.;,。"
_BRACKETS = {"[": "]", "(": ")", "<": ">", "{": "}"}
_BLANK_RUNS = re.compile(r"\n{3,}")
# Context an agent's harness puts in a user turn (Claude Code's reminders, Codex's environment): the harness's
# text, not the user's, read for volatile spans as system text is (the date, the working directory's state).
HARNESS_BLOCKS = (("<system-reminder>", "</system-reminder>"), ("<environment_context>", "</environment_context>"))


@dataclass(frozen=True, slots=True)
class PromptPolicy:
    volatile: VolatileAction = "relocate"
    # A kind of span ("id", "uuid", "clock", a tenant pattern's name...) with an action of its own: an ID
    # the model has no use for can be stripped while clock readings still move to the note.
    actions: Mapping[str, VolatileAction] = field(default_factory=dict, hash=False)
    scope: Literal["system", "history"] = "system"  # history: earlier user/assistant turns too
    note: Literal["last_user", "system_message"] = "last_user"
    canonical: bool = True  # system text in one form: the documented exception to "as the app sent it"
    # Tools sorted by name with sorted keys (a schema's properties keep their order). Opt-in: it helps
    # apps that send the same tools in varying orders, and changes the order the model reads them in.
    sort_tools: bool = False
    templates: tuple[Template, ...] = ()  # canonical preambles for near-identical system prompts
    # Built-in plus tenant-configured detectors, with the per-line result cache.
    scanner: LineScanner = field(default_factory=LineScanner, compare=False)


@dataclass(frozen=True, slots=True)
class Rewrite:
    body: dict[str, Any]
    changed: bool  # the body differs from the request's: it must be re-serialized
    detected: int  # volatile spans found
    moved: int  # spans taken out of the prefix (relocated or stripped)
    templated: int = 0  # system messages rewritten to a template's canonical preamble


class _Mover:
    """Collects the note lines of one request while its texts are rewritten in message order."""

    def __init__(self, policy: PromptPolicy) -> None:
        self.policy = policy
        self.note_lines: list[str] = []
        self.detected = 0
        self.moved = 0
        self.refs = 0
        self.templated = 0

    def system(self, text: str) -> str:
        """A system message: its git snapshot moved, canonical form, spans moved, then a matching template's
        canonical preamble."""
        if "gitStatus" in text:
            text = self.snapshot(text)
        text = self.canonical(text) if self.policy.canonical else self.raw(text)
        if self.policy.templates:
            applied = apply_template(text, self.policy.templates)
            if applied is not None:
                text, values = applied
                self.note_lines.extend(values)
                self.templated += 1
        return text

    def canonical(self, text: str) -> str:
        """System text: canonical form (line ends, NFC, trailing blanks, blank runs) and spans moved."""
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        text = "\n".join(self._move(self.policy.scanner.scan_canonical(text.split("\n")), canonical=True))
        if "\n\n\n" in text:
            text = _BLANK_RUNS.sub("\n\n", text)
        return text.strip("\n")

    def raw(self, text: str) -> str:
        """Conversation turns (and system text without canonical form): spans moved, nothing else."""
        return "\n".join(self._move(self.policy.scanner.scan_raw(text.split("\n")), canonical=False))

    def _move(self, scanned: list[ScannedLine], canonical: bool) -> list[str]:
        hits = [index for index, (_, spans) in enumerate(scanned) if spans]
        if not hits:
            return [line for line, _ in scanned]
        lines: list[str | None] = [line for line, _ in scanned]  # None: a line that was only a moved fact
        for index in hits:
            line, spans = scanned[index]
            self.detected += len(spans)
            acting = self._acting(spans)
            if acting:
                moved = self._move_line(line, acting)
                lines[index] = moved if moved is None or not canonical else canonical_line(moved)
        return [line for line in lines if line is not None]

    def _acting(self, spans: tuple[Span, ...]) -> list[tuple[Span, VolatileAction]]:
        """The spans to take out of the line, each with its action (relocate or strip)."""
        actions, default = self.policy.actions, self.policy.volatile
        if not actions:
            return [] if default == "keep" else [(span, default) for span in spans]
        acting = [(span, actions.get(span.kind, default)) for span in spans]
        return [pair for pair in acting if pair[1] != "keep"]

    def _move_line(self, line: str, acting: list[tuple[Span, VolatileAction]]) -> str | None:
        """The line without these spans (None: the line was only the fact and goes whole)."""
        pieces: list[str] = []
        cursor = 0
        for span, action in acting:
            start, end = _widen(line, span)
            if start < cursor:
                continue
            fact = line[start:end]
            self.moved += 1
            relocate = action == "relocate"
            if cursor == 0 and len(acting) == 1 and _whole_line(line, start, end):
                if relocate:
                    self.note_lines.append(fact)
                return None
            pieces.append(line[cursor:start])
            cursor = end
            if relocate:
                self.refs += 1
                marker = f"[ref {self.refs}]"
                pieces.append(marker)
                self.note_lines.append(f"{marker} = {fact}")
        pieces.append(line[cursor:])
        return "".join(pieces)

    def snapshot(self, block: str) -> str:
        """A coding agent's git snapshot in system text (branch, status, recent commits: new with every commit)
        moved whole to the note, a marker in its place, so the system text, and the tools that templates render
        after it, stay cached from one session to the next. The kind is ``git_status``: a tenant's ``actions``
        may strip it or keep it. (Where the agent puts it in its first user turn instead, after the system text
        and tools, it stays: each later turn would prefill it again in the note, more than a new session saves.)"""
        found = _GIT_SNAPSHOT.search(block)
        action = self.policy.actions.get("git_status", self.policy.volatile)
        if found is None or action == "keep":
            return block
        self.detected += 1
        self.moved += 1
        section = found.group().rstrip("\n")
        if action == "strip":
            return block[:found.start()] + block[found.start() + len(section):]
        self.refs += 1
        marker = f"[ref {self.refs}]"
        self.note_lines.append(f"{marker} = {section}")
        return block[:found.start()] + marker + block[found.start() + len(section):]

    def note(self) -> str | None:
        return NOTE_HEADER + "\n" + "\n".join(self.note_lines) if self.note_lines else None


def _widen(text: str, span: Span) -> tuple[int, int]:
    """Take brackets that enclose exactly the span along with it: ``[2026-11-22 11:51]``."""
    start, end = span.start, span.end
    if start > 0 and end < len(text) and _BRACKETS.get(text[start - 1]) == text[end]:
        return start - 1, end + 1
    return start, end


def _whole_line(line: str, start: int, end: int) -> bool:
    return not line[:start].strip(_BULLETS) and not line[end:].strip(_LINE_END_PUNCTUATION)


def _map_text(content: Any, change: Any) -> Any:
    """Apply ``change`` to a message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return change(content)
    if isinstance(content, list):
        return [
            {**part, "text": change(part["text"])}
            if is_text_part(part)
            else part
            for part in content
        ]
    return content


def _has_harness_block(content: Any) -> bool:
    if isinstance(content, str):
        return content.startswith(_HARNESS_OPENINGS)
    if isinstance(content, list):
        return any(is_text_part(part) and part["text"].startswith(_HARNESS_OPENINGS) for part in content)
    return False


_HARNESS_OPENINGS = tuple(opening for opening, _ in HARNESS_BLOCKS)
# A coding agent's git snapshot (Claude Code's gitStatus): a heading, the branch and status, then its recent
# commits, to the blank line after them (what follows is the harness's own fixed text).
_GIT_SNAPSHOT = re.compile(r"^(?:# gitStatus|gitStatus:)[^\n]*\n(?:[^\n]*\n)*?Recent commits:\n(?:[^\n]+\n?)*",
                           re.MULTILINE)


def _in_harness_block(mover: _Mover, rest: Callable[[str], str] | None, text: str) -> str:
    """A harness block that opens ``text`` (to its closing tag) with its volatile spans moved; the rest of the text
    through ``rest`` (the history's rule), or as it was."""
    for opening, closing in HARNESS_BLOCKS:
        if text.startswith(opening):
            end = text.find(closing)
            end = len(text) if end < 0 else end + len(closing)
            tail = text[end:]
            return mover.raw(text[:end]) + (rest(tail) if rest is not None and tail else tail)
    return rest(text) if rest is not None else text


def _is_note(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(NOTE_HEADER)


def _with_note(messages: list[dict[str, Any]], tail: int | None, note: str, placement: str) -> None:
    if placement == "last_user" and tail is not None:
        message = messages[tail]
        content = message.get("content")
        if isinstance(content, list):
            messages[tail] = {**message, "content": [*content, text_part(content, note)]}
        else:
            messages[tail] = {**message, "content": f"{content or ''}\n\n{note}"}
    else:
        messages.append({"role": "system", "content": note})


def rewrite_chat(body: dict[str, Any], policy: PromptPolicy) -> Rewrite:
    """Canonical form plus volatile-span handling for a validated chat completions body."""
    messages: list[dict[str, Any]] = body["messages"]
    tail = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if messages and messages[-1].get("role") in _SYSTEM_ROLES and not _is_note(messages[-1]):
        # The prompt ends with system text after the last user turn (an agent's environment block): the note
        # ends that, the prompt's end. On the user turn before it, it would sit before that text, and the next
        # turn, with the note on a later message, would re-prefill everything after it.
        tail = len(messages) - 1
    mover = _Mover(policy)
    new_messages = list(messages)
    changed = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in _SYSTEM_ROLES and not _is_note(message):
            change = mover.system
        elif role == "user" and _has_harness_block(message.get("content")):
            history = policy.scope == "history" and (tail is None or index < tail)
            change = partial(_in_harness_block, mover, mover.raw if history else None)
        elif policy.scope == "history" and role in _HISTORY_ROLES and (tail is None or index < tail):
            change = mover.raw
        else:
            continue
        content = message.get("content")
        new_content = _map_text(content, change)
        if new_content != content:
            new_messages[index] = {**message, "content": new_content}
            changed = True
    note = mover.note()
    if note is not None:
        _with_note(new_messages, tail, note, policy.note)
        changed = True
    new_body = {**body, "messages": new_messages} if changed else body
    if policy.sort_tools:
        updates = {key: sorted_tools(body[key]) for key in ("tools", "functions")
                   if isinstance(body.get(key), list) and body[key]}
        if updates:
            new_body = {**new_body, **updates}
            changed = True
    return Rewrite(new_body, changed, mover.detected, mover.moved, mover.templated)
