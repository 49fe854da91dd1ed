"""How much of a prompt repeats the previous one: the part the engine's prefix cache can reuse.

A prompt is compared as the sequence of pieces a chat template renders in order (tools, then each
message's role and text); the answer is the number of leading characters both prompts share. No
tokenizer runs on the request path, so tokens are estimated at four characters each; the offline
``prefixgate analyze`` counts real tokens and blocks.
"""

from __future__ import annotations

from typing import Any

import orjson

CHARS_PER_TOKEN = 4
Pieces = tuple[str, ...]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def chat_pieces(body: dict[str, Any]) -> Pieces:
    """The rendered order of a chat prompt: tools first, as templates put them in the head."""
    pieces = []
    tools = body.get("tools")
    if tools:
        pieces.append(orjson.dumps(tools).decode())
    for message in body["messages"]:
        pieces.append(f"<{message.get('role')}>")
        pieces.append(_text(message.get("content")))
    return tuple(pieces)


def completion_pieces(body: dict[str, Any]) -> Pieces:
    prompt = body.get("prompt")
    return (prompt,) if isinstance(prompt, str) else (orjson.dumps(prompt).decode(),)


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix, by binary search over slice compares (memcmp in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def shared_prefix(previous: Pieces, current: Pieces) -> int:
    """Characters at the start of ``current`` that equal the start of ``previous``."""
    shared = 0
    for before, now in zip(previous, current, strict=False):
        if before == now:
            shared += len(now)
            continue
        return shared + common_prefix(before, now)
    return shared


def total_length(pieces: Pieces) -> int:
    return sum(map(len, pieces))
