"""Rewrite a chat request so its prompt prefix is the same from one request to the next.

System text gets one canonical form; tools and response_format schemas get sorted keys; volatile
spans (clock readings, dates, IDs) in system messages, and in earlier turns when configured, are
moved to one note at the end of the prompt, where a changing value costs one short tail instead
of the whole prefill. Nothing is lost: each moved span appears in the note, in its original
order, and an inline span leaves a ``[ref N]`` marker at its place so the model can connect them.
Pure: a request body in, a new body out; the input is never mutated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from policies.canonical import canonical_text, canonical_tools, sorted_json
from policies.volatile import Detector, Span, find_volatile

VolatileAction = Literal["relocate", "strip", "keep"]
NOTE_HEADER = "[Request context, moved here from earlier in the prompt by prefixgate]"
_SYSTEM_ROLES = frozenset({"system", "developer"})
_HISTORY_ROLES = frozenset({"user", "assistant"})
_BULLETS = " \t-*#>•"
_LINE_END_PUNCTUATION = " \t.;,。"
_BRACKETS = {"[": "]", "(": ")", "<": ">", "{": "}"}


@dataclass(frozen=True, slots=True)
class PromptPolicy:
    volatile: VolatileAction = "relocate"
    scope: Literal["system", "history"] = "system"  # history: earlier user/assistant turns too
    note: Literal["last_user", "system_message"] = "last_user"
    canonical: bool = True
    detectors: tuple[Detector, ...] = ()  # tenant-configured, on top of the built-in ones


@dataclass(frozen=True, slots=True)
class Rewrite:
    body: dict[str, Any]
    changed: bool  # the body differs from the request's: it must be re-serialized
    detected: int  # volatile spans found
    moved: int  # spans taken out of the prefix (relocated or stripped)


class _Mover:
    """Collects the note lines of one request while its texts are rewritten in message order."""

    def __init__(self, policy: PromptPolicy) -> None:
        self.policy = policy
        self.note_lines: list[str] = []
        self.detected = 0
        self.moved = 0
        self.refs = 0

    def rewrite(self, text: str) -> str:
        spans = find_volatile(text, self.policy.detectors)
        self.detected += len(spans)
        if not spans or self.policy.volatile == "keep":
            return text
        relocate = self.policy.volatile == "relocate"
        pieces: list[str] = []
        cursor = 0
        for span in spans:
            start, end = _widen(text, span)
            if start < cursor:
                continue
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", end)
            line_end = len(text) if line_end < 0 else line_end
            fact = text[start:end]
            self.moved += 1
            if line_start >= cursor and _whole_line(text, line_start, start, end, line_end):
                pieces.append(text[cursor:line_start])
                cursor = min(line_end + 1, len(text))
                if relocate:
                    self.note_lines.append(fact)
            else:
                pieces.append(text[cursor:start])
                cursor = end
                if relocate:
                    self.refs += 1
                    marker = f"[ref {self.refs}]"
                    pieces.append(marker)
                    self.note_lines.append(f"{marker} = {fact}")
        pieces.append(text[cursor:])
        return "".join(pieces)

    def note(self) -> str | None:
        return NOTE_HEADER + "\n" + "\n".join(self.note_lines) if self.note_lines else None


def _widen(text: str, span: Span) -> tuple[int, int]:
    """Take brackets that enclose exactly the span along with it: ``[2026-11-22 11:51]``."""
    start, end = span.start, span.end
    if start > 0 and end < len(text) and _BRACKETS.get(text[start - 1]) == text[end]:
        return start - 1, end + 1
    return start, end


def _whole_line(text: str, line_start: int, start: int, end: int, line_end: int) -> bool:
    return not text[line_start:start].strip(_BULLETS) and not text[end:line_end].strip(_LINE_END_PUNCTUATION)


def _map_text(content: Any, change: Any) -> Any:
    """Apply ``change`` to a message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return change(content)
    if isinstance(content, list):
        return [
            {**part, "text": change(part["text"])}
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    return content


def _is_note(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(NOTE_HEADER)


def _with_note(messages: list[dict[str, Any]], tail: int | None, note: str, placement: str) -> None:
    if placement == "last_user" and tail is not None:
        message = messages[tail]
        content = message.get("content")
        if isinstance(content, list):
            messages[tail] = {**message, "content": [*content, {"type": "text", "text": note}]}
        else:
            messages[tail] = {**message, "content": f"{content or ''}\n\n{note}"}
    else:
        messages.append({"role": "system", "content": note})


def rewrite_chat(body: dict[str, Any], policy: PromptPolicy) -> Rewrite:
    """Canonical form plus volatile-span handling for a validated chat completions body."""
    messages: list[dict[str, Any]] = body["messages"]
    tail = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    mover = _Mover(policy)
    new_messages = list(messages)
    changed = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in _SYSTEM_ROLES and not _is_note(message):
            if policy.canonical:
                def change(text: str) -> str:
                    return canonical_text(mover.rewrite(canonical_text(text)))
            else:
                change = mover.rewrite
        elif policy.scope == "history" and role in _HISTORY_ROLES and (tail is None or index < tail):
            change = mover.rewrite
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
    if policy.canonical:
        updates: dict[str, Any] = {}
        for key in ("tools", "functions"):
            if isinstance(body.get(key), list) and body[key]:
                updates[key] = canonical_tools(body[key])
        if isinstance(body.get("response_format"), dict) and "json_schema" in body["response_format"]:
            updates["response_format"] = sorted_json(body["response_format"])
        if updates:
            new_body = {**new_body, **updates}
            changed = True
    return Rewrite(new_body, changed, mover.detected, mover.moved)
