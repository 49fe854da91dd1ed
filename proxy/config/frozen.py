"""The base of every configuration model: immutable, and unknown fields are errors (typos fail at start)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """A field's docstring (the string after it) is its description: docs/configuration.md's tables
    are written from them (``field_rows``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
