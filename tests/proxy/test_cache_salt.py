"""cache_salt per tenant: isolated by default, shared when configured, and the client's salt respected."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import FakeServer, pool

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
KEYS = {"alpha": "key-alpha-123", "beta": "key-beta-4567", "public": "key-public-89"}


@pytest.fixture
def gateway(fake: FakeServer, start_proxy: Callable[..., str]) -> str:
    return start_proxy({
        "pools": [pool("main", fake.base_url)],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()]},
        "tenants": {"public": {"prompt": {"cache_salt": "share"}}},
    })


def upstream_body(gateway: str, fake: FakeServer, tenant: str, body: dict[str, Any],
                  path: str = "/v1/chat/completions") -> dict[str, Any]:
    answer = httpx.post(gateway + path, json=body, headers={"Authorization": f"Bearer {KEYS[tenant]}"})
    assert answer.status_code == 200, answer.text
    return httpx.get(fake.url + "/_stats").json()["last_body"]


def test_each_tenant_gets_its_own_stable_salt(gateway: str, fake: FakeServer) -> None:
    alpha = upstream_body(gateway, fake, "alpha", CHAT)
    beta = upstream_body(gateway, fake, "beta", CHAT)
    assert alpha["cache_salt"] != beta["cache_salt"]
    assert upstream_body(gateway, fake, "alpha", CHAT)["cache_salt"] == alpha["cache_salt"]
    assert {k: v for k, v in alpha.items() if k != "cache_salt"} == CHAT  # nothing else touched


def test_a_client_salt_splits_a_tenant_but_cannot_reach_another(gateway: str, fake: FakeServer) -> None:
    plain = upstream_body(gateway, fake, "alpha", CHAT)["cache_salt"]
    own = upstream_body(gateway, fake, "alpha", {**CHAT, "cache_salt": "user-1"})["cache_salt"]
    assert own not in {plain, "user-1"}
    # beta sending alpha's upstream salt as its own still lands somewhere else
    assert upstream_body(gateway, fake, "beta", {**CHAT, "cache_salt": plain})["cache_salt"] != plain


def test_share_mode_sends_the_clients_salt_or_none(gateway: str, fake: FakeServer) -> None:
    assert "cache_salt" not in upstream_body(gateway, fake, "public", CHAT)
    assert upstream_body(gateway, fake, "public", {**CHAT, "cache_salt": "s"})["cache_salt"] == "s"


def test_completions_are_salted_too(gateway: str, fake: FakeServer) -> None:
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 2}
    chat_salt = upstream_body(gateway, fake, "alpha", CHAT)["cache_salt"]
    assert upstream_body(gateway, fake, "alpha", body, "/v1/completions")["cache_salt"] == chat_salt


@pytest.mark.parametrize("salt", ["", 5, ["x"]])
def test_bad_client_salt_is_a_400_naming_the_field(gateway: str, salt: Any) -> None:
    answer = httpx.post(gateway + "/v1/chat/completions", json={**CHAT, "cache_salt": salt},
                        headers={"Authorization": f"Bearer {KEYS['alpha']}"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "cache_salt"
