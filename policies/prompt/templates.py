"""Tenant templates: many near-identical system preambles rewritten to one canonical preamble.

Apps (and tenants of one platform) often send the same instructions with a few words changed:
the assistant's name, the company, the language. Each variant is its own prefix to the engine.
A template names the shared text and its variable parts, ``You are {agent}, the support agent of
{company}.``; a system message that starts with a match is rewritten to the template's one
canonical form, ``You are [agent], the support agent of [company].``, and the values go to the tail
note (``[agent] = Max``), so every variant shares one cached prefix and the model still sees them.
Whitespace runs in the template match any whitespace run; a variable matches text within a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from string import Formatter

from policies.prompt.canonical import canonical_line

_WHITESPACE = re.compile(r"(\s+)")


@dataclass(frozen=True, slots=True)
class Template:
    name: str
    pattern: re.Pattern[str]
    canonical: str  # the preamble every matching message starts with after the rewrite
    variables: tuple[str, ...]  # in first-appearance order


def compile_template(name: str, text: str) -> Template:
    """Build a template from ``{variable}`` text (``{{``/``}}`` for literal braces); ValueError if malformed."""
    text = "\n".join(canonical_line(line) for line in text.replace("\r\n", "\n").strip().split("\n"))
    regex = [r"\A"]
    canonical = []
    variables: list[str] = []
    try:
        parsed = list(Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"template '{name}': {exc}") from None
    for literal, field, spec, conversion in parsed:
        for piece in _WHITESPACE.split(literal):
            if piece:
                regex.append(r"\s+" if piece.isspace() else re.escape(piece))
        canonical.append(literal)
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(f"template '{name}': '{{{field}{'!' + conversion if conversion else ''}"
                             f"{':' + spec if spec else ''}}}' is not a plain {{name}} variable")
        if field in variables:
            regex.append(f"(?P={field})")
        else:
            variables.append(field)
            regex.append(rf"(?P<{field}>[^\n]+?)")
        canonical.append(f"[{field}]")
    if not any(literal.strip() for literal, *_ in parsed):
        raise ValueError(f"template '{name}': needs some fixed text, not only variables")
    regex.append(r"(?=\n|\Z)")
    return Template(name, re.compile("".join(regex)), "".join(canonical), tuple(variables))


def apply_template(text: str, templates: tuple[Template, ...]) -> tuple[str, list[str]] | None:
    """The text with its matching preamble made canonical, and the note lines; None if none match."""
    for template in templates:
        if text.startswith(template.canonical):
            return None  # rewritten already (the values are in its note)
        match = template.pattern.match(text)
        if match is None:
            continue
        notes = [f"[{variable}] = {match.group(variable)}" for variable in template.variables]
        return template.canonical + text[match.end():], notes
    return None
