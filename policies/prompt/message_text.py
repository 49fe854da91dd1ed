"""A message's text, whichever API wrote it: chat's ``text`` parts and the Responses API's
``input_text`` (the app's turns) and ``output_text`` (the model's, replayed as history).

One place for what counts as text, so the rewrite, retrieval and the prompt's pieces read a
Responses conversation exactly as they read a chat.
"""

from __future__ import annotations

from typing import Any

TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str)


def text_of(content: Any) -> str:
    """A message's text: a string, or its text parts joined by newlines ('' for anything else)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content if is_text_part(part))
    return ""


def text_part(content: list[Any], text: str) -> dict[str, str]:
    """A new text part for ``content``, of the kind its parts use: ``input_text`` in a Responses
    input item (where a chat ``text`` part is refused), ``text`` in a chat message."""
    kind = next((part["type"] for part in content if is_text_part(part)), "text")
    return {"type": "input_text" if kind == "output_text" else kind, "text": text}
