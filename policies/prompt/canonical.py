"""One stable byte form for the parts of a prompt that apps produce in many equivalent ways.

Two system prompts that differ only in Unicode normalization, line endings or trailing blanks render
to different tokens and so share no cached prefix; ``canonical_line`` maps each line to one form, and
the engine's answer cannot depend on the difference. Applying it twice changes nothing (tests check
that property).

``sorted_tools`` is different in kind: a tool list's order and its objects' key order are what the
chat template renders, so reordering them changes what the model reads. It runs only for tenants
that opt in (``PromptPolicy.sort_tools``). Even then a JSON Schema's ``properties`` keep the order
the app wrote: guided decoding writes an object's fields in that order, and a model that must answer
before it reasons answers worse.
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


def sorted_keys(value: Any) -> Any:
    """The same JSON value with its objects' keys sorted, except the order of a schema's ``properties``
    (lists keep their order too: ``required``, ``enum`` and ``prefixItems`` are read in order)."""
    if isinstance(value, dict):
        return {key: _properties_as_sent(value[key]) if key == "properties" else sorted_keys(value[key])
                for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(item) for item in value]
    return value


def _properties_as_sent(value: Any) -> Any:
    """A ``properties`` map: its names in the app's order, each property's own schema sorted. Its keys
    are property names, not keywords, so a property called ``properties`` is not special."""
    if isinstance(value, dict):
        return {name: sorted_keys(schema) for name, schema in value.items()}
    return sorted_keys(value)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
        if isinstance(tool.get("name"), str):
            return tool["name"]
    return ""


def sorted_tools(tools: list[Any]) -> list[Any]:
    """Tools (or legacy functions) sorted by name, each with sorted keys; a stable sort keeps ties."""
    return sorted((sorted_keys(tool) for tool in tools), key=_tool_name)
