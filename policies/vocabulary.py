"""A vocabulary: a closed set of words (a metric label's values, a field of an answer), each with its one-line
meaning, declared in one place.

A vocabulary is a ``StrEnum`` whose members are written ``NAME = "word", "what it means"``: each member is the
word itself (equal to the string, so it works as a metric label, a JSON value or a dict key), and its
``meaning`` is what a metric's help, /openapi.json and docs/configuration.md say of it. A new word is one line.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self


class Vocabulary(StrEnum):
    """The base of every vocabulary (``ReplicaReason``, ``PoolReason``, ``ShedReason``, ``CloseReason``,
    ``ErrorKind``); it declares no words of its own."""

    _value_: str
    meaning: str

    def __new__(cls, value: str, meaning: str) -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

