"""Rewrite a chat request so its prompt prefix is the same from one request to the next.

System text gets one canonical form; volatile spans (clock readings, dates, IDs) in system messages,
and in earlier turns when configured, are moved to a note: those of the leading system text to the end
of the prompt, where a changing value costs one short tail instead of the whole prefill; those of a
later message (an agent's environment block, a harness's reminder in a user turn) to the end of the
user turn it belongs to. A later message comes back as it was in every later turn, and so does its
note, in the same place: a note at the prompt's end would move with each turn and take the turns after
it out of the cache. Nothing is lost unless the policy
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from policies.prompt.canonical import canonical_line, sorted_tools
from policies.prompt.harness import GIT_SNAPSHOT, has_harness_block, in_harness_block
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
    """Collects the note lines of one request while its texts are rewritten in message order, each under the
    message its note will end (``anchor``: None for the note at the prompt's end)."""

    def __init__(self, policy: PromptPolicy) -> None:
        self.policy = policy
        self.notes: dict[int | None, list[str]] = {}
        self.anchor: int | None = None
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
                self._lines().extend(values)
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

    def history(self, text: str) -> str:
        """An earlier turn's text (``scope: history``), its spans to the note at the prompt's end: the apps that
        want this render their history anew on every request (relative times, fresh IDs), so a note at the
        turn's own end would change with it."""
        anchor, self.anchor = self.anchor, None
        try:
            return self.raw(text)
        finally:
            self.anchor = anchor

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
                    self._lines().append(fact)
                return None
            pieces.append(line[cursor:start])
            cursor = end
            if relocate:
                self.refs += 1
                marker = f"[ref {self.refs}]"
                pieces.append(marker)
                self._lines().append(f"{marker} = {fact}")
        pieces.append(line[cursor:])
        return "".join(pieces)

    def snapshot(self, block: str) -> str:
        """A coding agent's git snapshot in system text (branch, status, recent commits: new with every commit)
        moved whole to the note, a marker in its place, so the system text, and the tools that templates render
        after it, stay cached from one session to the next. The kind is ``git_status``: a tenant's ``actions``
        may strip it or keep it. (Where the agent puts it in its first user turn instead, after the system text
        and tools, it stays: moved to that turn's note it would save a new session the reminder after it, and cost
        a session started with no new commit as much, prefilled again in the note.)"""
        found = GIT_SNAPSHOT.search(block)
        action = self.policy.actions.get("git_status", self.policy.volatile)
        if found is None or action == "keep":
            return block
        self.detected += 1
        self.moved += 1
        section = found.group().rstrip("\n")
        if action == "strip":
            return block[:found.start()] + block[found.end():]
        self.refs += 1
        marker = f"[ref {self.refs}]"
        self._lines().append(f"{marker} = {section}")
        return block[:found.start()] + marker + block[found.start() + len(section):]

    def harness(self, block: str) -> str:
        """A harness's block in a user turn: its spans moved (``raw``), and its git snapshot dropped where the tenant
        strips ``git_status`` (moved or kept, it stays in place: ``snapshot``)."""
        if "gitStatus" in block and self.policy.actions.get("git_status", self.policy.volatile) == "strip":
            block = self.snapshot(block)
        return self.raw(block)

    def _lines(self) -> list[str]:
        return self.notes.setdefault(self.anchor, [])

    def placed_notes(self, tail: int | None) -> dict[int | None, str]:
        """Each note by the message it ends: the leading system text's with the last user turn's own, on it
        (the prompt's end, refs in order); None: a note with no user turn to end (a system message after all)."""
        notes = dict(self.notes)
        if tail is not None and None in notes:
            notes[tail] = [*notes.pop(None), *notes.get(tail, ())]
        return {anchor: NOTE_HEADER + "\n" + "\n".join(lines) for anchor, lines in notes.items() if lines}


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


def _is_note(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(NOTE_HEADER)


def _with_note(messages: list[dict[str, Any]], anchor: int | None, note: str) -> None:
    """``note`` at the end of the user turn ``anchor`` (a text part of its own where its content is parts), or a
    system message after the conversation where there is no user turn to end."""
    if anchor is None:
        messages.append({"role": "system", "content": note})
        return
    message = messages[anchor]
    content = message.get("content")
    if isinstance(content, list):
        messages[anchor] = {**message, "content": [*content, text_part(content, note)]}
    else:
        messages[anchor] = {**message, "content": f"{content or ''}\n\n{note}"}


def rewrite_chat(body: dict[str, Any], policy: PromptPolicy) -> Rewrite:
    """Canonical form plus volatile-span handling for a validated chat completions body."""
    messages: list[dict[str, Any]] = body["messages"]
    tail = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    on_turns = policy.note == "last_user"
    mover = _Mover(policy)
    new_messages = list(messages)
    changed = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "user" and on_turns:
            mover.anchor = index  # this turn's spans, and those of system text after it, end this turn
        if role in _SYSTEM_ROLES and not _is_note(message):
            change = mover.system
        elif role == "user" and has_harness_block(message.get("content")):
            history = policy.scope == "history" and (tail is None or index < tail)
            change = partial(in_harness_block, mover.harness, mover.history if history else None)
        elif policy.scope == "history" and role in _HISTORY_ROLES and (tail is None or index < tail):
            change = mover.history
        else:
            continue
        content = message.get("content")
        new_content = _map_text(content, change)
        if new_content != content:
            new_messages[index] = {**message, "content": new_content}
            changed = True
    for anchor, note in mover.placed_notes(tail if on_turns else None).items():
        _with_note(new_messages, anchor, note)
        changed = True
    new_body = {**body, "messages": new_messages} if changed else body
    if policy.sort_tools:
        updates = {key: sorted_tools(body[key]) for key in ("tools", "functions")
                   if isinstance(body.get(key), list) and body[key]}
        if updates:
            new_body = {**new_body, **updates}
            changed = True
    return Rewrite(new_body, changed, mover.detected, mover.moved, mover.templated)
