"""One stable byte form for the parts of a prompt that apps produce in many equivalent ways.

Two system prompts that differ only in Unicode normalization, line endings or trailing blanks,
or two tool lists that differ only in order or key order, render to different tokens and so
share no cached prefix. These functions map each to a single form; applying them twice changes
nothing (tests check that property).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_TRAILING_BLANKS = re.compile(r"[ \t\f\v]+(?=\n|$)")
_BLANK_RUNS = re.compile(r"\n{3,}")


def canonical_text(text: str) -> str:
    """NFC, ``\\n`` line ends, no trailing blanks on a line, at most one blank line in a row."""
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _TRAILING_BLANKS.sub("", text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip("\n")


def sorted_json(value: Any) -> Any:
    """The same JSON value with every object's keys in sorted order (lists keep their order)."""
    if isinstance(value, dict):
        return {key: sorted_json(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_json(item) for item in value]
    return value


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
        if isinstance(tool.get("name"), str):
            return tool["name"]
    return ""


def canonical_tools(tools: list[Any]) -> list[Any]:
    """Tools (or legacy functions) sorted by name, each with sorted keys; a stable sort keeps ties."""
    return sorted((sorted_json(tool) for tool in tools), key=_tool_name)
