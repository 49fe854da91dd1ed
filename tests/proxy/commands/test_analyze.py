"""``prefixgate analyze``: the gain a team would see, computed from its own request log."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from proxy.commands.cli import main

RULES = "\n".join(f"Rule {n}: keep answers about topic {n} short and precise." for n in range(30))


def agent_request(minute: int, question: str) -> dict:
    return {"model": "m", "messages": [
        {"role": "system", "content": f"Current time: 2026-11-22 11:{minute:02d}:00 UTC\n{RULES}"},
        {"role": "user", "content": question}]}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "requests.jsonl"
    lines = [orjson.dumps(agent_request(minute, f"Question {minute}?")) for minute in range(20)]
    lines.insert(3, b"{broken")
    lines.insert(5, orjson.dumps({"body": agent_request(59, "From a batch file?")}))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.fixture
def tokenizer(tmp_path: Path) -> Path:
    trained = Tokenizer(models.BPE(unk_token="[UNK]"))
    trained.pre_tokenizer = pre_tokenizers.ByteLevel()
    trained.train_from_iterator([RULES, "Current time: 2026-11-22 Question?"],
                                trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    trained.save(str(path))
    return path


def test_report_shows_the_gain_and_names_the_clock_line(log: Path, tokenizer: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(log), "--tokenizer", str(tokenizer), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["requests"] == 21 and len(report["skipped"]) == 1 and "line 4: not JSON" in report["skipped"][0]
    sent, after = report["as_sent"], report["after_prefixgate"]
    assert sent["hit_rate"] < 0.1  # the clock line is the first line: every prompt misses from block one
    assert after["hit_rate"] > 0.7  # all but the first prompt reuse the whole system prompt
    assert sent["breaks"][0]["kind"] == "clock" and sent["breaks"][0]["requests"] == 20
    assert sent["breaks"][0]["example"].startswith("Current time: 2026-11-22")
    assert after["breaks"] == []


def test_text_report_with_litellms_tokenizer(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(log), "--block-size", "32"]) == 0
    out = capsys.readouterr().out
    assert "block size 32 tokens" in out and "litellm (gpt-4o)" in out
    assert "after prefixgate" in out and "clock" in out


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("prompt: {volatile: nope}\n")
    (tmp_path / "r.jsonl").write_text("{}\n")
    assert main(["analyze", str(tmp_path / "r.jsonl"), "--config", str(tmp_path / "bad.yaml")]) == 2
    assert "prompt.volatile" in capsys.readouterr().err
