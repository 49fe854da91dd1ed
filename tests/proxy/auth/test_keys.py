"""API key -> tenant: open mode, the three refusals, the admin key, and no key kept in clear."""

from __future__ import annotations

import gc

import pytest

from policies.refusals import Refused, Unauthorized
from proxy.auth.keys import KeyTable
from proxy.config.gateway import OPEN_TENANT

ACME, ACME_2, GLOBEX = "sk-acme-0123456789", "sk-acme-second-key", "sk-globex-0123456789"
ADMIN = "sk-admin-0123456789"


@pytest.fixture
def table() -> KeyTable:
    return KeyTable({ACME: "acme", ACME_2: "acme", GLOBEX: "globex"}, admin_key=ADMIN)


def _refusal(table: KeyTable, authorization: str | None) -> Unauthorized:
    with pytest.raises(Refused) as refused:
        table.tenant_for(authorization)
    assert isinstance(refused.value.refusal, Unauthorized)
    return refused.value.refusal


def test_with_no_keys_every_request_is_the_default_tenant() -> None:
    table = KeyTable({})
    assert table.open_mode
    assert {table.tenant_for(header) for header in (None, "", "Bearer whatever", "Basic x")} == {OPEN_TENANT}


def test_each_key_authenticates_as_its_tenant(table: KeyTable) -> None:
    assert not table.open_mode
    assert table.tenant_for(f"Bearer {ACME}") == table.tenant_for(f"Bearer {ACME_2}") == "acme"
    assert table.tenant_for(f"Bearer {GLOBEX}") == "globex"
    assert table.tenant_for(f"bearer  {ACME} ") == "acme"  # the scheme in any case, blanks around the key


@pytest.mark.parametrize("header", [None, ""])
def test_no_key_is_refused_as_missing(table: KeyTable, header: str | None) -> None:
    assert _refusal(table, header) == Unauthorized("missing")


@pytest.mark.parametrize("header", [ACME, f"Basic {ACME}", "Bearer", "Bearer   ", f"Token {ACME}"])
def test_a_header_that_is_not_bearer_and_a_key_is_refused_as_malformed(table: KeyTable, header: str) -> None:
    assert _refusal(table, header) == Unauthorized("malformed")


@pytest.mark.parametrize("key", [ACME[:-1], ACME + "0", ACME.upper(), ADMIN, "acme", "ключ-0123456789"])
def test_a_key_no_tenant_has_is_refused_as_invalid(table: KeyTable, key: str) -> None:
    assert _refusal(table, f"Bearer {key}") == Unauthorized("invalid")


def test_only_the_admin_key_is_admin(table: KeyTable) -> None:
    assert table.is_admin(f"Bearer {ADMIN}") and table.is_admin(f"bearer {ADMIN}")
    for header in (None, "", ADMIN, f"Basic {ADMIN}", f"Bearer {ACME}", f"Bearer {ADMIN}x"):
        assert not table.is_admin(header), header


def test_without_an_admin_key_every_request_is_admin() -> None:
    table = KeyTable({ACME: "acme"})
    assert table.is_admin(None) and table.is_admin(f"Bearer {ACME}")


def _held(root: object) -> list[str | bytes]:
    """Every string and bytes object reachable from ``root`` (a dict's string keys too, which the
    collector does not visit)."""
    seen, found, todo = set(), [], [root]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, str | bytes):
            found.append(item)
        elif not isinstance(item, type):
            todo.extend(gc.get_referents(item))
            if isinstance(item, dict):
                todo.extend(item)
    return found


def test_the_table_holds_no_key_in_clear(table: KeyTable) -> None:
    held = _held(table)
    assert "acme" in held and "globex" in held  # the walk reaches what the table keeps
    for key in (ACME, ACME_2, GLOBEX, ADMIN):
        assert not any(key in item if isinstance(item, str) else key.encode() in item for item in held), key
