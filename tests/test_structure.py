"""The house rules the code keeps, so the next feature has somewhere obvious to go.

- ``policies/`` decides, ``proxy/`` does: policies import nothing of proxy/ and nothing that reads
  the network or a clock, and keep no mutable module globals.
- Modules stay under 300 lines and functions under 60, so each reads in a sitting.
- An OpenAI-shaped error is built in one place (``openai_error``); the rest of the shell raises
  ``Refused`` with a refusal from ``policies.refusals``.
- Every package under proxy/ says in its docstring what lives there.
- Packages import one way: each imports only the packages below it in ``PROXY_ORDER`` or ``POLICIES_ORDER``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for package in ("proxy", "policies") for p in (ROOT / package).rglob("*.py"))
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60
# What "pure" rules out: I/O, the clock, processes, threads.
IMPURE = ("proxy", "asyncio", "socket", "time", "aiohttp", "httpx", "redis", "qdrant_client", "starlette",
          "uvicorn", "subprocess", "threading", "os")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", [p for p in SOURCES if p.relative_to(ROOT).parts[0] == "policies"], ids=_name)
def test_policies_are_pure(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert not _imports(tree) & set(IMPURE), f"{_name(path)} imports {sorted(_imports(tree) & set(IMPURE))}"
    changed = _module_state_changed(tree)
    assert not changed, f"{_name(path)} changes module-level state: {changed}"


MUTATORS = frozenset({"append", "extend", "add", "update", "pop", "popitem", "clear", "setdefault", "insert",
                      "remove", "discard"})


def _module_state_changed(tree: ast.Module) -> list[str]:
    """Where a function changes a module-level name: ``global``, item assignment or a mutating method."""
    names = {target.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
             for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
             if isinstance(target, ast.Name)}
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found.append(f"line {node.lineno}: global {', '.join(node.names)}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                  and isinstance(node.func.value, ast.Name) and node.func.value.id in names):
                found.append(f"line {node.lineno}: {node.func.value.id}.{node.func.attr}()")
            elif isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [f"line {node.lineno}: {t.value.id}[...] =" for t in targets  # type: ignore[union-attr]
                          if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names]
    return found


def test_modules_and_functions_stay_small() -> None:
    too_long = []
    for path in SOURCES:
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{_name(path)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{_name(path)}:{node.lineno} {node.name}: {lines} lines")
    assert not too_long, too_long


def test_openai_errors_are_built_in_one_place() -> None:
    builders = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "OpenAIError":
                builders.append(_name(path))
    assert set(builders) == {"proxy/wire/errors.py"}, builders


def test_every_package_says_what_lives_in_it() -> None:
    for init in (ROOT / "proxy").rglob("__init__.py"):
        if init.parent == ROOT / "proxy":
            continue
        assert ast.get_docstring(ast.parse(init.read_text())), f"{_name(init)} has no docstring"


# The package order, from the ground up (docs/architecture.md, "Packages import one way"). A package
# imports only packages on lower rows; packages on one row do not import each other. Imports made only
# for type checking count too: a type a package needs from above is a sign the code sits in the wrong place.
PROXY_ORDER = (
    ("clock", "transports", "micro_batch"),
    ("config",),
    ("wire", "engine"),
    ("connections",),
    ("observability",),
    ("caches", "kv_events", "conversations", "admission"),
    ("auth", "retrieval", "upstream"),
    ("calls",),
    ("gateway",),
    ("http",),
    ("app",),
    ("commands",),
    ("__main__",),
)
POLICIES_ORDER = (
    ("vocabulary",),
    ("refusals",),
    ("request",),
    ("prompt", "answers"),
    ("admission",),
    ("routing", "retrieval"),
)


def _imported(tree: ast.Module, root: str) -> set[str]:
    """The packages (or top-level modules) of ``root`` this module imports, by their first name under it."""
    found: set[str] = set()
    for node in ast.walk(tree):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        found.update(name.split(".")[1] for name in names if name.startswith(root + "."))
    return found


def _rows(order: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    return {name: row for row, names in enumerate(order) for name in names}


def _order_broken(root: str, order: tuple[tuple[str, ...], ...]) -> list[str]:
    rows = _rows(order)
    wrong = []
    for path in sorted((ROOT / root).rglob("*.py")):
        parts = path.relative_to(ROOT / root).parts
        if len(parts) == 1 and parts[0] == "__init__.py":
            continue
        own = parts[0].removesuffix(".py")
        for other in sorted(_imported(ast.parse(path.read_text()), root) - {own}):
            if rows.get(other, len(order)) >= rows[own]:
                wrong.append(f"{_name(path)} ({own}, row {rows[own]}) imports {root}.{other} "
                             f"(row {rows.get(other, 'unlisted')})")
    return wrong


@pytest.mark.parametrize("root,order", [("proxy", PROXY_ORDER), ("policies", POLICIES_ORDER)])
def test_packages_import_one_way(root: str, order: tuple[tuple[str, ...], ...]) -> None:
    """Every package (and top-level module) is in the order, and imports only the rows below its own."""
    listed = _rows(order)
    present = {path.name.removesuffix(".py") for path in (ROOT / root).iterdir()
               if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").exists()}
    assert present == set(listed), f"not in {root}'s order: {sorted(present - set(listed))}; gone: " \
                                   f"{sorted(set(listed) - present)}"
    assert not _order_broken(root, order), _order_broken(root, order)


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the string constants that stand as statements: docstrings, and a config field's doc."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def test_prefixgate_headers_are_named_in_one_place() -> None:
    """Every ``x-prefixgate-*`` header is declared in ``proxy.wire.headers`` (``ResponseHeaders`` writes the
    answer's); no other module of proxy/ spells one, not even inside a message, so a new header has one home
    and a renamed one changes once. Docs may name them, and so may policies/, which cannot import the wire and
    names them only in its vocabularies' meanings."""
    spelled = []
    for path in SOURCES:
        if path == ROOT / "proxy" / "wire" / "headers.py" or _name(path).startswith("policies/"):
            continue
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            value = node.value if isinstance(node, ast.Constant) and id(node) not in docstrings else None
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            if isinstance(text, str) and "x-prefixgate-" in text.lower():
                spelled.append(f"{_name(path)}:{node.lineno} {text}")
    assert not spelled, spelled


def test_only_the_client_answer_writes_to_the_client() -> None:
    """``ClientAnswer`` (``proxy.wire.answer``) is the one owner of what goes to a client: no other module builds
    an ASGI response message, so no capability package calls ``send`` (Starlette's own routes answer with its
    ``Response`` objects)."""
    writers = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in ("http.response.start", "http.response.body"):
                writers.append(f"{_name(path)}:{node.lineno}")
    assert writers and all(w.startswith("proxy/wire/answer.py:") for w in writers), writers
