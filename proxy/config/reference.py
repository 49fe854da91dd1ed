"""The configuration reference's tables, written from the config models and the vocabularies of reasons.

Each field table in docs/configuration.md sits between ``<!-- fields: NAME -->`` and ``<!-- /fields -->``,
each table of a metric label's values (why a pool or replica was chosen, why a request was shed) between
``<!-- values: NAME -->`` and ``<!-- /values -->``; ``prefixgate config-reference`` rewrites them from the
models' fields (name, default, docstring) and from the vocabularies the policies declare (``VALUES``), and a
test fails when the committed file differs, so the reference cannot drift from what the code accepts or
counts. The prose around the tables is written by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from policies.refusals import ShedReason
from policies.routing.pool_choice import PoolReason
from policies.routing.replica import ReplicaReason
from policies.vocabulary import Vocabulary
from proxy.config.auth import AuthConfig
from proxy.config.gateway import Config, LimitsConfig, TenantConfig
from proxy.config.pools import BasePoolConfig, PoolConfig, pool_kinds
from proxy.config.prompt import PromptConfig
from proxy.config.redis import RedisConfig
from proxy.config.responses import ResponsesConfig
from proxy.config.retrieval import AnswerCacheConfig, RetrievalConfig, TenantRetrieval
from proxy.config.server import AccessLogConfig, EngineConfig, MetricsConfig, ServerConfig
from proxy.config.upstream import UpstreamConfig

TABLES: dict[str, Any] = {  # models, and the union of the kinds of pool (``PoolConfig``)
    "top": Config, "server": ServerConfig, "auth": AuthConfig, "pools": PoolConfig, "limits": LimitsConfig,
    "prompt": PromptConfig, "tenants": TenantConfig, "retrieval": RetrievalConfig,
    "tenant_retrieval": TenantRetrieval, "answer_cache": AnswerCacheConfig, "redis": RedisConfig,
    "responses": ResponsesConfig, "metrics": MetricsConfig, "access_log": AccessLogConfig, "engine": EngineConfig,
}
# Models with a table of their own (and a pool's fields, which embeddings shares) appear as one row
# where another model holds them; smaller ones (timeouts, health, patterns) are spelled out in place.
_OWN_TABLE = {*TABLES.values(), UpstreamConfig}
VALUES: Mapping[str, type[Vocabulary]] = MappingProxyType(
    {"pool_reasons": PoolReason, "replica_reasons": ReplicaReason, "shed_reasons": ShedReason})
_REGION = re.compile(r"(<!-- (fields|values): (\w+) -->\n)(.*?)(<!-- /\2 -->)", re.S)
DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _nested(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """(model, in a list) where a field holds a model, its list, or either or None."""
    if get_origin(annotation) in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        annotation = options[0] if len(options) == 1 else None
    listed = get_origin(annotation) is list
    if listed:
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, listed
    return None


def _default(info: FieldInfo) -> str:
    extra = info.json_schema_extra
    if isinstance(extra, dict) and "shown_default" in extra:
        return str(extra["shown_default"])
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)  # no factory here reads the other fields
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (list, dict)) and not value:
        return "`[]`" if isinstance(value, list) else "`{}`"
    return f"`{value}`"


def field_rows(model: Any, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(dotted field path, default, meaning) for every field a config file may set on ``model``, or on a pool of
    any kind (``PoolConfig``: ``pool_rows``)."""
    if model is PoolConfig:
        yield from pool_rows()
        return
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        path = prefix + name
        meaning = " ".join((info.description or "").split()).replace("|", "\\|")
        yield path, _default(info), meaning
        nested = _nested(info.annotation)
        if nested is not None and nested[0] not in _OWN_TABLE:
            yield from field_rows(nested[0], path + ("[]." if nested[1] else "."))


def pool_rows() -> Iterator[tuple[str, str, str]]:
    """A pool's rows, whatever its kind (``pool_kinds``): a row every kind has as it is, one that only some kinds
    have (or that means something else in each) marked with them; ``kind`` says what each kind is, in its model's
    docstring."""
    kinds = pool_kinds()
    having: dict[tuple[str, str, str], list[str]] = {}
    for kind, model in kinds.items():
        for row in field_rows(model):
            having.setdefault(row, []).append(kind)
    default_kind = next(iter(kinds))
    for (path, default, meaning), its_kinds in having.items():
        if path == "kind":
            if its_kinds == [default_kind]:
                described = "; ".join(f"`{kind}`: {' '.join((model.__doc__ or '').split())}"
                                      for kind, model in kinds.items())
                yield path, default, f"{BasePoolConfig.model_fields['kind'].description}. {described}"
        elif len(its_kinds) < len(kinds):
            yield path, default, f"(`kind: {' or '.join(its_kinds)}`) {meaning}"
        else:
            yield path, default, meaning


def table(model: Any) -> str:
    lines = ["| field | default | meaning |", "|---|---|---|"]
    lines += [f"| `{path}` | {default} | {meaning} |" for path, default, meaning in field_rows(model)]
    return "\n".join(lines) + "\n"


def values_table(vocabulary: type[Vocabulary]) -> str:
    lines = ["| value | meaning |", "|---|---|"]
    for word in vocabulary:
        cell = word.meaning.replace("|", "\\|")
        lines.append(f"| `{word}` | {cell} |")
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """``text`` with every marked table written anew; an unknown table name is an error."""

    def one(match: re.Match[str]) -> str:
        kind, name = match.group(2), match.group(3)
        known: Mapping[str, object] = TABLES if kind == "fields" else VALUES
        if name not in known:
            raise KeyError(f"no {kind} table named '{name}' (known: {', '.join(known)})")
        fresh = table(TABLES[name]) if kind == "fields" else values_table(VALUES[name])
        return match.group(1) + fresh + match.group(5)

    return _REGION.sub(one, text)


def run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    text = path.read_text()
    fresh = render(text)
    if args.check:
        if fresh != text:
            print(f"{path} differs from the config models; run `prefixgate config-reference`", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        path.write_text(fresh)
    return 0


def add_reference_parser(commands: Any) -> None:
    # A maintainer's tool: no help line, so the user's `prefixgate --help` does not list it (build_parser).
    command = commands.add_parser("config-reference",
                                  description="rewrite the configuration reference's field tables from the config "
                                              "models")
    command.add_argument("--file", default=str(DOC), help="the reference to rewrite (default: docs/configuration.md)")
    command.add_argument("--check", action="store_true", help="only say whether it is up to date (exit 1 if not)")
    command.set_defaults(handler=run)
