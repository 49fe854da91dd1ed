"""The OpenAPI document that GET /openapi.json serves: openapi.yaml beside this module, with each schema
marked ``x-vocabulary: NAME`` filled in from the vocabulary the policies declare under that name
(``VOCABULARIES``). The reasons /admin/route gives are then listed where the code that gives them lists
them, with their meanings, and a reason added there is in the document without an edit here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from policies.routing.pool_choice import PoolReason
from policies.routing.replica import ReplicaReason
from policies.vocabulary import Vocabulary

MARK = "x-vocabulary"
VOCABULARIES: Mapping[str, type[Vocabulary]] = MappingProxyType(
    {"replica_reasons": ReplicaReason, "pool_reasons": PoolReason})
SOURCE = Path(__file__).parent / "openapi.yaml"


def filled(node: Any, vocabularies: Mapping[str, type[Vocabulary]] = VOCABULARIES) -> Any:
    """``node`` with every marked schema replaced by a string enum of the vocabulary's values, whose
    description lists what each means; an unknown name is an error, so a typo cannot serve a bare string."""
    if isinstance(node, list):
        return [filled(item, vocabularies) for item in node]
    if not isinstance(node, dict):
        return node
    if MARK not in node:
        return {key: filled(value, vocabularies) for key, value in node.items()}
    schema = dict(node)
    name = schema.pop(MARK)
    if name not in vocabularies:
        raise KeyError(f"openapi.yaml: {MARK} names no vocabulary '{name}' (known: {', '.join(vocabularies)})")
    words = vocabularies[name]
    meanings = "\n".join(f"- `{word}`: {word.meaning}" for word in words)
    lead = schema.get("description")
    return {**schema, "type": "string", "enum": [word.value for word in words],
            "description": f"{lead}\n\n{meanings}" if lead else meanings}


def openapi_document() -> dict[str, Any]:
    """The document as served, read anew on each call (the route keeps its JSON)."""
    return filled(yaml.safe_load(SOURCE.read_text()))
