"""Configuration of the chat prompt rewrite (``prompt`` and ``tenants.<name>.prompt``). Part of the
one frozen ``Config``, kept apart because it is its own feature.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from policies.prompt.templates import compile_template
from policies.prompt.volatile import BUILTIN_KINDS
from proxy.config.frozen import Frozen as _Frozen


class VolatilePattern(_Frozen):
    """A tenant's own volatile span: a regex; a group named ``value`` narrows the span to it."""

    name: str = Field(min_length=1)
    """names the span in the tail note"""
    regex: str = Field(min_length=1)
    """a Python regular expression, matched within one line; a group named `value` narrows the span to it"""

    @field_validator("regex")
    @classmethod
    def _compiles(cls, regex: str) -> str:
        try:
            re.compile(regex)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return regex


class TemplateConfig(_Frozen):
    """A canonical system preamble with ``{variables}``; see docs/configuration.md, prompt.templates."""

    name: str = Field(min_length=1)
    """names the template (in errors and metrics)"""
    text: str = Field(min_length=1)
    """the canonical preamble, with `{variables}`"""

    @model_validator(mode="after")
    def _compiles(self) -> TemplateConfig:
        compile_template(self.name, self.text)  # its ValueError names the template and the problem
        return self


def span_kinds(prompt: PromptConfig) -> tuple[str, ...]:
    """The kinds of span its detectors give (the built-in ones, then its patterns' names): what
    ``prompt.actions`` may name."""
    return (*BUILTIN_KINDS, *(pattern.name for pattern in prompt.patterns))


class PromptConfig(_Frozen):
    """How chat prompts are made cache-friendly (see docs/configuration.md, section prompt)."""

    volatile: Literal["relocate", "strip", "keep"] = "relocate"
    """what to do with volatile spans (dates, clock lines, UUIDs, traceparent, labelled trace/request/session IDs,
    labelled epochs and epochs after words that name a moment): `relocate` to the tail note, `strip` (drop), `keep`
    (count only)"""
    actions: dict[str, Literal["relocate", "strip", "keep"]] = Field(default_factory=dict)
    """an action of its own for one kind of span, over `volatile`: `{id: strip}` drops labelled trace/request IDs (no
    use to the model, yet prefilled on every request when relocated) while dates still move to the note. Kinds:
    `clock` (labelled clock lines), `datetime`, `epoch`, `uuid`, `traceparent`, `id` (labelled IDs, ULIDs, AWS X-Ray
    trace headers), `git_status` (a coding agent's git snapshot in a `<system-reminder>`), and your `patterns`'
    names"""
    scope: Literal["system", "history"] = "system"
    """where to look: `system` (system/developer messages) or `history` (also earlier user and assistant turns; never
    the last user turn)"""
    note: Literal["last_user", "system_message"] = "last_user"
    """where the note goes: `last_user`, appended to the last user message, but for spans of a later message (system
    text after a user turn, an agent harness's block in a user turn), which end that user turn, where the note stays
    in every later turn of the conversation (docs/architecture.md, Fidelity); or `system_message`, all in one final
    system message (some chat templates refuse a system message that is not first)"""
    canonical: bool = True
    """system text in one canonical form (NFC, `\\n` line ends, no trailing blanks, one blank line at most), the one
    change besides moved volatile spans that a default rewrite makes to what the model reads"""
    sort_tools: bool = False
    """opt-in: the tool list sorted by name and each tool's keys sorted, for apps that send the same tools in varying
    orders. Risk: the model reads its tools in another order (models favour tools listed first) and the template
    renders each tool's fields in another order, so answers can change. A schema's `properties` always keep their
    order (guided decoding writes fields in it); `response_format` is never reordered"""
    patterns: list[VolatilePattern] = Field(default_factory=list)
    """your own volatile spans: `[{name: ticket, regex: "TICKET-\\\\d+"}]`; a group named `value` narrows the span;
    matched within one line"""
    templates: list[TemplateConfig] = Field(default_factory=list)
    """canonical system preambles: `[{name: support, text: "You are {agent}, the support agent of {company}."}]`. A
    system message that starts with a match (whitespace runs match any whitespace; a variable matches text within
    one line; `{{`/`}}` are literal braces) is rewritten to `You are [agent], the support agent of [company].` and
    the values go to the note as `[agent] = Max`"""
    cache_salt: Literal["isolate", "share", "off"] = "isolate"
    """who shares cached prefixes. `isolate`: each tenant gets its own vLLM `cache_salt`, keyed with the deployment's
    `auth.cache_salt_secret` (a client's own salt is mixed into it), so no tenant can hit or time another's cached
    prefixes; `share`: tenants in this mode share cached blocks with each other, per client salt, in a salt namespace
    no isolated tenant's salt can fall in; `off`: no salt is sent and a client's is dropped, for engines that do not
    know `cache_salt` (vLLM before 0.9, other OpenAI-compatible servers)"""
