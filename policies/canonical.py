"""One stable byte form for the parts of a prompt that apps produce in many equivalent ways.

Two system prompts that differ only in Unicode normalization, line endings or trailing blanks,
or two tool lists that differ only in order or key order, render to different tokens and so
share no cached prefix. These functions map each to a single form; applying them twice changes
nothing (tests check that property).
"""

from __future__ import annotations

import unicodedata
from typing import Any

_TRAILING_BLANKS = " \t\f\v"


def canonical_line(line: str) -> str:
    """NFC, no trailing blanks. Line-local, so a text can be made canonical one line at a time."""
    if not line.isascii():
        line = unicodedata.normalize("NFC", line)
    return line.rstrip(_TRAILING_BLANKS)


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
