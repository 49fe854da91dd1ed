"""Each vocabulary of reasons (why a replica or a pool was chosen, why a pool shed a request, why a
connection was closed, what failed upstream) is declared once, as a ``Vocabulary`` whose words carry what
each means, and is read from there: a word added to ``ReplicaReason`` is in prefixgate_replica_choices_total's
help and in the served OpenAPI document at once, and docs/configuration.md fails its test until `prefixgate
config-reference` writes it into the table. What the docs and dashboards name of a label's values must be
declared too."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from policies.refusals import OVERFLOWED, ShedReason
from policies.routing.pool_choice import PoolReason
from policies.routing.replica import ReplicaReason
from policies.vocabulary import Vocabulary
from proxy.config.reference import DOC, render, values_table
from proxy.connections.guard import CloseReason
from proxy.http.openapi_document import MARK, filled, openapi_document
from proxy.observability.metrics import Metrics
from proxy.transports.base import ErrorKind

ROOT = Path(__file__).resolve().parents[1]
# (metric, label) -> the values it may carry, as the code declares them; the help of each is built from them
DECLARED: dict[tuple[str, str], type[Vocabulary]] = {
    ("prefixgate_replica_choices_total", "reason"): ReplicaReason,
    ("prefixgate_pool_choices_total", "reason"): PoolReason,
    ("prefixgate_shed_total", "reason"): ShedReason,
    ("prefixgate_connections_closed_total", "reason"): CloseReason,
    ("prefixgate_upstream_errors_total", "kind"): ErrorKind,
}


def _words(vocabulary: type[Vocabulary]) -> list[str]:
    return [word.value for word in vocabulary]


def _allowed(metric: str, label: str) -> set[str]:
    values = set(_words(DECLARED[metric, label]))
    return values | {value + OVERFLOWED for value in values} if metric == "prefixgate_shed_total" else values


@pytest.mark.parametrize("vocabulary", DECLARED.values(), ids=[metric for metric, _ in DECLARED])
def test_each_word_is_its_string_with_a_one_line_meaning(vocabulary: type[Vocabulary]) -> None:
    assert issubclass(vocabulary, StrEnum)
    for word in vocabulary:
        assert word == word.value and str(word) == f"{word}" == word.value == word.name.lower()
        assert word.meaning.strip() and "\n" not in word.meaning


def _helps() -> dict[str, str]:
    text = Metrics().render().decode()
    return {family.name: family.documentation for family in text_string_to_metric_families(text)}


@pytest.mark.parametrize("metric,label", DECLARED, ids=[metric for metric, _ in DECLARED])
def test_each_metric_help_spells_out_its_declared_values(metric: str, label: str) -> None:
    help_text = _helps()[metric.removesuffix("_total")]
    missing = [word.value for word in DECLARED[metric, label] if f"{word.value}: {word.meaning}" not in help_text]
    assert not missing, f"{metric}'s help leaves out {missing}"


def _schemas() -> dict[str, Any]:
    return openapi_document()["components"]["schemas"]["RouteExplanation"]["properties"]


@pytest.mark.parametrize("field,vocabulary", [("reason", ReplicaReason), ("pool_reason", PoolReason)])
def test_the_served_openapi_enums_are_the_declared_reasons_with_their_meanings(field: str,
                                                                               vocabulary: type[Vocabulary]) -> None:
    schema = _schemas()[field]
    assert schema["enum"] == _words(vocabulary) and MARK not in schema
    assert all(f"`{word.value}`: {word.meaning}" in schema["description"] for word in vocabulary)


class Fake(Vocabulary):
    X = "x", "an x"


def test_the_openapi_fill_refuses_a_vocabulary_it_does_not_know() -> None:
    assert filled({"a": [{MARK: "fake", "description": "Why."}]}, {"fake": Fake}) == \
        {"a": [{"description": "Why.\n\n- `x`: an x", "type": "string", "enum": ["x"]}]}
    with pytest.raises(KeyError, match="no vocabulary 'typo'"):
        filled({MARK: "typo"})


@pytest.mark.parametrize("name,vocabulary", [("shed_reasons", ShedReason), ("pool_reasons", PoolReason),
                                             ("replica_reasons", ReplicaReason)])
def test_the_configuration_reference_has_a_table_of_each_vocabulary(name: str, vocabulary: type[Vocabulary]) -> None:
    text = DOC.read_text()
    assert f"<!-- values: {name} -->\n{values_table(vocabulary)}<!-- /values -->" in text
    grown = render(f"<!-- values: {name} -->\n<!-- /values -->\n")
    assert all(f"| `{word.value}` | {word.meaning} |" in grown for word in vocabulary)


def _texts() -> list[tuple[str, str]]:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "deploy").rglob("*.json")),
             *sorted((ROOT / "deploy").rglob("*.y*ml"))]
    return [(str(path.relative_to(ROOT)), path.read_text()) for path in paths]


SELECTOR = re.compile(r'(prefixgate_[a-z_]+)\{[^}]*?\b([a-z_]+)=\\?"([a-z_]+)\\?"')
LISTED = re.compile(r"`(prefixgate_[a-z_]+)\{(?:[a-z_]+,)*([a-z_]+)}`\s+\(((?:`[a-z_]+`,?\s*)+)\)")


def label_value_problems(texts: list[tuple[str, str]]) -> list[str]:
    """A value in a selector (``metric{reason="home"}``) that its metric's label does not declare, and a
    list of a label's values (``metric{reason}`` (`a`, `b`)) that is not all of them."""
    found = []
    for name, text in texts:
        for metric, label, value in SELECTOR.findall(text):
            if (metric, label) in DECLARED and value not in _allowed(metric, label):
                found.append(f"{name}: {metric}{{{label}=\"{value}\"}} is not a declared value")
        for metric, label, listed in LISTED.findall(text):
            values = re.findall(r"`([a-z_]+)`", listed)
            if (metric, label) in DECLARED and values != _words(DECLARED[metric, label]):
                found.append(f"{name}: {metric}{{{label}}} lists {values}, not {_words(DECLARED[metric, label])}")
    return found


def test_docs_and_dashboards_name_only_declared_values_and_list_them_all() -> None:
    texts = _texts()
    assert sum(len(SELECTOR.findall(text)) for _, text in texts) >= 3
    assert not label_value_problems(texts), label_value_problems(texts)


def test_the_label_value_rules_catch_a_stale_name_and_a_short_list() -> None:
    bad = [("doc", 'see `prefixgate_replica_choices_total{reason="hot"}` and '
                   "`prefixgate_connections_closed_total{reason}` (`idle`, `evicted`)")]
    assert len(label_value_problems(bad)) == 2
    good = [("doc", 'rate(prefixgate_shed_total{pool="p",reason=\\"queue_full_overflowed\\"}[5m])')]
    assert not label_value_problems(good)
