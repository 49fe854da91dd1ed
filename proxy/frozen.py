"""The base of every configuration model: immutable, and unknown fields are errors (typos fail at start)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
