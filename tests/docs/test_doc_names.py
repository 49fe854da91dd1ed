"""README.md and docs/*.md name only things that exist: config fields, environment variables, metrics
and command-line flags. Each kind is found by its shape, so the rules need no list of exceptions:

- **Config field**: a backticked span that starts with a dotted path (`server.drain_timeout_s`,
  `auth.keys[].key_env`, `tenants.<name>.retrieval`) whose first part is a top-level config section
  (a field of ``Config``) or a pool's own section (``timeouts``, ``health``, ``engine_metrics``). A
  path that ends in a file extension (`retrieval.py`, `engine.log`, `tokenizer.json`) is a file name.
  Each part must be a field of the model reached so far; where that is a mapping, any part (`<name>`,
  `NAME`, `acme`) is a key, and where it is a list, `[]` or `[N]` is an item.
- **Environment variable**: every ``PREFIXGATE_*`` name is one prefixgate reads (an ``ENV_*`` constant of
  proxy/config/gateway.py) or one a shipped config names as an API or admin key's variable (``key_env`` or
  ``admin_key_env`` in deploy/ or in a YAML example of the docs).
- **Metric**: every ``prefixgate_*`` name is on a running gateway's /metrics page (``prefixgate_engine_*``
  must start at least one name there).
- **Command-line flag**: after ``prefixgate COMMAND`` in a backticked span or a line of a shell code block
  (comments aside), COMMAND must exist and every ``--flag`` must be one of its flags. A backticked span
  that is only a flag (`--delete DOC`) must be a flag of a command named in the same paragraph, else in
  the heading of its section; a flag with no ``prefixgate`` command near (a bench script's, vLLM's) is
  not checked.
"""

from __future__ import annotations

import argparse
import re
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import httpx
from pydantic import BaseModel

from proxy.commands.cli import build_parser
from proxy.config import load as config_module
from proxy.config.gateway import Config
from proxy.config.pools import PoolConfig, pool_kinds
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import exposed_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
SHELL = {"bash", "sh", "shell", "console"}

CONFIG_PATH = re.compile(r"[a-z_]+(?:\.(?:<[^<>`]+>|[A-Za-z_]\w*)|\[\d*\])+")
FILE_NAME = re.compile(r"\.(?:py|md|json|jsonl|ya?ml|lua|sh|txt|html|pdf|png|log|toml|jinja)$")
POOL_SECTIONS = {name for model in pool_kinds().values() for name, info in model.model_fields.items()
                 if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)}

ENV_NAME = re.compile(r"\bPREFIXGATE_[A-Z0-9_]*[A-Z0-9]\b")
KEY_ENV = re.compile(r"""\b(?:admin_)?key_env["']?\s*[:=]\s*["']?([A-Z][A-Z0-9_]*)""")

METRIC = re.compile(r"\bprefixgate_[a-z_]*[a-z]\b(?!\*)")
METRIC_PREFIX = re.compile(r"\b(prefixgate_[a-z_]+)\*")

COMMAND = re.compile(r"(?:^|[\s/])prefixgate\s+([a-z][\w-]*)(.*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
FLAG_ONLY = re.compile(r"^(--[a-z][\w-]*)(?:[ =].*)?$")


@dataclass
class Doc:
    """One markdown file split the way the rules read it."""

    name: str
    spans: list[str]  # backticked text outside code blocks
    shell_lines: list[str]  # lines of shell code blocks, comments dropped
    code: str  # every code block's text
    text: str  # the whole file
    paragraphs: list[tuple[str, str]]  # (the section's heading, a paragraph outside code blocks)


def read_doc(name: str, text: str) -> Doc:
    shell_lines, code = [], []
    for match in FENCE.finditer(text):
        code.append(match.group(2))
        if match.group(1).strip().lower() in SHELL:
            shell_lines += [line.split(" #", 1)[0] for line in match.group(2).splitlines()]
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    paragraphs, heading = [], ""
    for block in re.split(r"\n\s*\n", prose):
        for line in block.splitlines():
            if line.startswith("#"):
                heading = line
        paragraphs.append((heading, block))
    return Doc(name, SPAN.findall(prose), shell_lines, "\n".join(code), text, paragraphs)


def docs() -> list[Doc]:
    return [read_doc(path.relative_to(ROOT).as_posix(), path.read_text()) for path in DOCS]


# ---- config fields ----------------------------------------------------------------------------

def config_paths(doc: Doc) -> Iterator[str]:
    """Backticked spans that start with a dotted config path (what follows it is free: `: value`)."""
    for span in doc.spans:
        match = CONFIG_PATH.match(span.strip())
        if match is None or ("." not in match.group(0) and "[" not in match.group(0)):
            continue
        path, rest = match.group(0), span.strip()[match.end():]
        if rest[:1] not in ("", " ", ":", "=", ",", ")") or FILE_NAME.search(path):
            continue
        if path.split(".")[0].split("[")[0] in Config.model_fields | dict.fromkeys(POOL_SECTIONS):
            yield path


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> X."""
    if get_origin(annotation) in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return options[0]
    return annotation


def config_path_problem(path: str) -> str | None:
    """Why ``path`` names no config field; None when it does."""
    parts = re.findall(r"\[\d*\]|<[^<>]+>|[^.\[\]]+", path)
    return _walk(Config if parts[0] in Config.model_fields else PoolConfig, parts, "")


def _walk(node: Any, parts: list[str], walked: str) -> str | None:
    """Why ``parts`` name no field below ``node``; a pool's (``PoolConfig``) are any kind's fields."""
    for number, part in enumerate(parts):
        if node == PoolConfig:
            problems = [_walk(model, parts[number:], walked) for model in pool_kinds().values()]
            return None if None in problems else problems[0]
        node = _unwrap(node)
        origin = get_origin(node)
        if part.startswith("["):
            if origin is not list:
                return f"{walked or 'the top level'} is not a list"
            node = get_args(node)[0]
        elif origin is dict:
            node = get_args(node)[1]
        elif origin is list:
            return f"{walked} is a list: name an item with [] before .{part}"
        elif isinstance(node, type) and issubclass(node, BaseModel):
            if part not in node.model_fields:
                return f"{node.__name__} has no field {part!r} (after {walked or 'the top level'})"
            node = node.model_fields[part].annotation
        else:
            return f"{walked} is a value, it has no {part!r}"
        walked += part if part.startswith("[") or not walked else f".{part}"
    return None


# ---- environment variables --------------------------------------------------------------------

def env_names_read() -> set[str]:
    """What prefixgate reads from the environment by name, and the key variables shipped configs name."""
    read = {value for name, value in vars(config_module).items() if name.startswith("ENV_")}
    shipped = [path.read_text(errors="replace") for path in (ROOT / "deploy").rglob("*") if path.is_file()]
    shipped += [doc.code for doc in docs()]
    return read | {name for text in shipped for name in KEY_ENV.findall(text)}


# ---- command-line flags -----------------------------------------------------------------------

def command_flags() -> dict[str, set[str]]:
    """Each subcommand of ``prefixgate`` and its long options."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {option for action in sub._actions for option in action.option_strings}
            for name, sub in commands.choices.items()}


def commands_in(text: str) -> Iterator[tuple[str, str]]:
    """(command, what follows it) for each ``prefixgate COMMAND`` in the backticked spans of ``text``."""
    for span in SPAN.findall(text):
        match = COMMAND.search(span)
        if match:
            yield match.group(1), match.group(2)


def flag_problems(doc: Doc, known: dict[str, set[str]]) -> Iterator[str]:
    uses = [COMMAND.search(line) for line in doc.shell_lines]
    uses += [COMMAND.search(span) for span in doc.spans]
    for use in filter(None, uses):
        command, rest = use.group(1), use.group(2)
        if command not in known:
            yield f"`prefixgate {command}`: no such command (commands: {', '.join(sorted(known))})"
            continue
        for flag in FLAG.findall(rest):
            if flag not in known[command]:
                yield f"`prefixgate {command} {flag}`: no such flag"
    for heading, paragraph in doc.paragraphs:
        near = [command for command, _ in commands_in(paragraph)] or [command for command, _ in commands_in(heading)]
        near = [command for command in near if command in known]
        if not near:
            continue
        for span in SPAN.findall(paragraph):
            flag = FLAG_ONLY.match(span.strip())
            if flag and not any(flag.group(1) in known[command] for command in near):
                yield f"`{flag.group(1)}` is no flag of prefixgate {' or '.join(sorted(set(near)))}"


# ---- the checks, on any docs --------------------------------------------------------------------

def problems(pages: Iterable[Doc], metrics: set[str] | None = None) -> list[str]:
    """Every name the pages give that does not exist (metrics only when a /metrics page's names are given)."""
    env = env_names_read()
    known = command_flags()
    found = []
    for doc in pages:
        found += [f"{doc.name}: `{path}`: {why}" for path in config_paths(doc)
                  if (why := config_path_problem(path)) is not None]
        found += [f"{doc.name}: {name}: prefixgate does not read it and no shipped config names it as a key's "
                  "variable" for name in sorted(set(ENV_NAME.findall(doc.text)) - env)]
        found += [f"{doc.name}: {problem}" for problem in flag_problems(doc, known)]
        if metrics is not None:
            named, prefixes = set(METRIC.findall(doc.text)), set(METRIC_PREFIX.findall(doc.text))
            found += [f"{doc.name}: {name}: not on /metrics" for name in sorted(named - metrics)]
            found += [f"{doc.name}: {prefix}*: no metric starts so" for prefix in sorted(prefixes)
                      if not any(name.startswith(prefix) for name in metrics)]
    return found


def live_metric_names(fake: FakeServer, start_proxy: Callable[..., str]) -> set[str]:
    """The sample names a gateway's /metrics has, or would have once its labelled children exist."""
    proxy = start_proxy({"pools": [pool("p", fake.base_url, max_in_flight=2)]})
    body = {"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10).status_code == 200
    return exposed_names(httpx.get(proxy + "/metrics").text)


def test_the_docs_name_only_config_fields_env_vars_metrics_and_flags_that_exist(
        fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    pages = docs()
    metrics = live_metric_names(fake, start_proxy)
    assert problems(pages, metrics) == []
    # The rules must keep finding what they look for, or a change of shape would pass them silently.
    assert sum(1 for doc in pages for _ in config_paths(doc)) >= 20
    assert len({name for doc in pages for name in ENV_NAME.findall(doc.text)}) >= 5
    assert len({name for doc in pages for name in METRIC.findall(doc.text)}) >= 20
    assert sum(1 for doc in pages for line in doc.shell_lines + doc.spans if COMMAND.search(line)) >= 5


BOGUS = """# Bogus

Set `server.drain_timeout` (no `_s`), `tenants.<name>.retrival.top_n`, `auth.keys.key_env` and
`PREFIXGATE_WORKERS`; watch `prefixgate_requests_dropped_total` and `prefixgate_nothing_*`.
Ingest with `prefixgate ingest ./docs --tenant acme --recursive`, then `prefixgate reindex`.

## `prefixgate analyze REQUESTS.jsonl`

Give it `--block-size 16` and `--sample 100`.
"""


def test_each_rule_catches_a_bogus_name() -> None:
    metrics = {"prefixgate_requests_total"}
    found = problems([read_doc("bogus.md", BOGUS)], metrics)
    for expected in ("`server.drain_timeout`: ServerConfig has no field 'drain_timeout'",
                     "`tenants.<name>.retrival.top_n`: TenantConfig has no field 'retrival'",
                     "`auth.keys.key_env`: auth.keys is a list",
                     "PREFIXGATE_WORKERS: prefixgate does not read it",
                     "prefixgate_requests_dropped_total: not on /metrics", "prefixgate_nothing_*: no metric",
                     "`prefixgate ingest --recursive`: no such flag", "`prefixgate reindex`: no such command",
                     "`--sample` is no flag of prefixgate analyze"):
        assert any(expected in problem for problem in found), (expected, found)
    assert len(found) == 9, found  # and nothing else: `--block-size` is analyze's, `--tenant` ingest's


def test_names_that_exist_pass() -> None:
    good = read_doc("good.md", """`server.drain_timeout_s`, `tenants.acme.retrieval.top_n`, `auth.keys[].key_env`,
`pools[].health.interval`, `timeouts.first_byte`, `prompt.actions: {id: strip}`, `retrieval.py`, `engine.log`,
`PREFIXGATE_CONFIG`, `PREFIXGATE_ADMIN_KEY`, `prefixgate serve --config FILE --workers 2`.
""")
    assert problems([good]) == []
