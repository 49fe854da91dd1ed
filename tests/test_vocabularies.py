"""Each vocabulary of reasons (why a replica or a pool was chosen, why a pool shed a request, why a
connection was closed, what failed upstream) is declared once, with what each value means, and is read
from there: a value added to ``REPLICA_REASONS`` is in prefixgate_replica_choices_total's help and in the
served OpenAPI document at once, and docs/configuration.md fails its test until `prefixgate
config-reference` writes it into the table. What the docs and dashboards name of a label's values must be
declared too."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import pytest
from prometheus_client.parser import text_string_to_metric_families

from policies.admission.refusals import OVERFLOWED, SHED_REASONS, ShedReason
from policies.routing.pool_choice import POOL_REASONS, PoolReason
from policies.routing.replica import REPLICA_REASONS, ReplicaReason
from proxy.config.reference import DOC, render, values_table
from proxy.connections.guard import REASONS as CLOSE_REASONS
from proxy.http.openapi_document import MARK, filled, openapi_document
from proxy.observability.metrics import Metrics
from proxy.transports.base import ERROR_KINDS

ROOT = Path(__file__).resolve().parents[1]
# (metric, label) -> the values it may carry, as the code declares them; the help of each is built from them
DECLARED: dict[tuple[str, str], Mapping[str, str]] = {
    ("prefixgate_replica_choices_total", "reason"): REPLICA_REASONS,
    ("prefixgate_pool_choices_total", "reason"): POOL_REASONS,
    ("prefixgate_shed_total", "reason"): SHED_REASONS,
    ("prefixgate_connections_closed_total", "reason"): CLOSE_REASONS,
    ("prefixgate_upstream_errors_total", "kind"): ERROR_KINDS,
}


def _allowed(metric: str, label: str) -> set[str]:
    values = set(DECLARED[metric, label])
    return values | {value + OVERFLOWED for value in values} if metric == "prefixgate_shed_total" else values


@pytest.mark.parametrize("literal,values", [(ReplicaReason, REPLICA_REASONS), (PoolReason, POOL_REASONS),
                                            (ShedReason, SHED_REASONS)], ids=["replica", "pool", "shed"])
def test_the_type_names_the_declared_values_each_with_a_one_line_meaning(literal: Any,
                                                                         values: Mapping[str, str]) -> None:
    assert get_args(literal) == tuple(values)
    assert all(meaning.strip() and "\n" not in meaning for meaning in values.values())


def _helps() -> dict[str, str]:
    text = Metrics().render().decode()
    return {family.name: family.documentation for family in text_string_to_metric_families(text)}


@pytest.mark.parametrize("metric,label", DECLARED, ids=[metric for metric, _ in DECLARED])
def test_each_metric_help_spells_out_its_declared_values(metric: str, label: str) -> None:
    help_text = _helps()[metric.removesuffix("_total")]
    missing = [value for value, meaning in DECLARED[metric, label].items() if f"{value}: {meaning}" not in help_text]
    assert not missing, f"{metric}'s help leaves out {missing}"


def _schemas() -> dict[str, Any]:
    return openapi_document()["components"]["schemas"]["RouteExplanation"]["properties"]


@pytest.mark.parametrize("field,values", [("reason", REPLICA_REASONS), ("pool_reason", POOL_REASONS)])
def test_the_served_openapi_enums_are_the_declared_reasons_with_their_meanings(field: str,
                                                                               values: Mapping[str, str]) -> None:
    schema = _schemas()[field]
    assert schema["enum"] == list(values) and MARK not in schema
    assert all(f"`{value}`: {meaning}" in schema["description"] for value, meaning in values.items())


def test_the_openapi_fill_refuses_a_vocabulary_it_does_not_know() -> None:
    assert filled({"a": [{MARK: "fake", "description": "Why."}]}, {"fake": {"x": "an x"}}) == \
        {"a": [{"description": "Why.\n\n- `x`: an x", "type": "string", "enum": ["x"]}]}
    with pytest.raises(KeyError, match="no vocabulary 'typo'"):
        filled({MARK: "typo"})


@pytest.mark.parametrize("name,values", [("shed_reasons", SHED_REASONS), ("pool_reasons", POOL_REASONS),
                                         ("replica_reasons", REPLICA_REASONS)])
def test_the_configuration_reference_has_a_table_of_each_vocabulary(name: str, values: Mapping[str, str]) -> None:
    text = DOC.read_text()
    assert f"<!-- values: {name} -->\n{values_table(values)}<!-- /values -->" in text
    grown = render(f"<!-- values: {name} -->\n<!-- /values -->\n")
    assert all(f"| `{value}` | {meaning} |" in grown for value, meaning in values.items())


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
            if (metric, label) in DECLARED and values != list(DECLARED[metric, label]):
                found.append(f"{name}: {metric}{{{label}}} lists {values}, not {list(DECLARED[metric, label])}")
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
