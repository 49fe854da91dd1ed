"""docs/configuration.md's field tables are written from the config models and must match them."""

from __future__ import annotations

from pathlib import Path

from proxy.commands.cli import main
from proxy.config.reference import DOC, TABLES, field_rows, render


def test_the_committed_reference_is_what_the_config_models_say() -> None:
    text = DOC.read_text()
    assert render(text) == text, "docs/configuration.md is stale: run `prefixgate config-reference`"


def test_every_table_is_in_the_reference_and_every_field_has_a_meaning() -> None:
    text = DOC.read_text()
    for name, model in TABLES.items():
        assert f"<!-- fields: {name} -->" in text, name
        undocumented = [path for path, _, meaning in field_rows(model) if not meaning]
        assert not undocumented, f"{name}: fields without a docstring: {undocumented}"


def test_nested_settings_are_spelled_out_with_their_defaults() -> None:
    rows = {path: default for path, default, _ in field_rows(TABLES["pools"])}
    assert rows["timeouts.first_byte"] == "`120`" and rows["health.eject_after"] == "`3`"
    assert rows["engine_metrics.interval"] == "`2`" and rows["name"] == "required"
    prompt = {path for path, _, _ in field_rows(TABLES["prompt"])}
    assert {"patterns[].regex", "templates[].text"} <= prompt


def test_the_command_rewrites_a_stale_reference_and_check_says_so(tmp_path: Path, capsys) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# Reference\n\n<!-- fields: redis -->\n| old | table |\n<!-- /fields -->\n\nProse stays.\n")
    assert main(["config-reference", "--file", str(stale), "--check"]) == 1
    assert "differs from the config models" in capsys.readouterr().err
    assert main(["config-reference", "--file", str(stale)]) == 0
    text = stale.read_text()
    assert "| old | table |" not in text and "| `timeout_ms` | `100` |" in text and text.endswith("Prose stays.\n")
    assert main(["config-reference", "--file", str(stale), "--check"]) == 0
