"""cache_salt per tenant: isolated by default, shared in a namespace of its own, off when asked; salts are
keyed with the deployment's secret, which survives restarts and is never written anywhere but its file."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from policies.prompt.cache_salt import SHARED_PREFIX, salt_policy, tenant_salt
from proxy.auth.salt_secret import SECRET_FILE, SecretFileError, deployment_secret
from proxy.config.load import ConfigError, config_from_dump, dump_config
from tests.support.configs import make_config, pool
from tests.support.fake_server import FakeServer

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
KEYS = {"alpha": "key-alpha-123", "beta": "key-beta-4567", "public": "key-public-89", "docs": "key-docs-0123",
        "plain": "key-plain-456"}
SECRET = "salt-secret-for-tests-0123"


def config(fake: FakeServer, **auth: Any) -> dict[str, Any]:
    return {
        "pools": [pool("main", fake.base_url)],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()], **auth},
        "tenants": {"public": {"prompt": {"cache_salt": "share"}}, "docs": {"prompt": {"cache_salt": "share"}},
                    "plain": {"prompt": {"cache_salt": "off"}}},
    }


@pytest.fixture
def gateway(fake: FakeServer, start_proxy: Callable[..., str]) -> str:
    return start_proxy(config(fake, cache_salt_secret=SECRET))


def upstream_body(gateway: str, fake: FakeServer, tenant: str, body: dict[str, Any],
                  path: str = "/v1/chat/completions") -> dict[str, Any]:
    answer = httpx.post(gateway + path, json=body, headers={"Authorization": f"Bearer {KEYS[tenant]}"})
    assert answer.status_code == 200, answer.text
    return httpx.get(fake.url + "/_stats").json()["last_body"]


def sent_salt(gateway: str, fake: FakeServer, tenant: str, client_salt: str | None = None) -> str | None:
    body = CHAT if client_salt is None else {**CHAT, "cache_salt": client_salt}
    return upstream_body(gateway, fake, tenant, body).get("cache_salt")


def test_each_tenant_gets_its_own_stable_salt(gateway: str, fake: FakeServer) -> None:
    alpha = upstream_body(gateway, fake, "alpha", CHAT)
    beta = upstream_body(gateway, fake, "beta", CHAT)
    assert alpha["cache_salt"] != beta["cache_salt"]
    assert alpha["cache_salt"] == tenant_salt(SECRET.encode(), "alpha")
    assert upstream_body(gateway, fake, "alpha", CHAT)["cache_salt"] == alpha["cache_salt"]
    assert {k: v for k, v in alpha.items() if k != "cache_salt"} == CHAT  # nothing else touched


def test_a_client_salt_splits_a_tenant_but_cannot_reach_another(gateway: str, fake: FakeServer) -> None:
    plain = sent_salt(gateway, fake, "alpha")
    own = sent_salt(gateway, fake, "alpha", "user-1")
    assert own not in {plain, "user-1"}
    # beta sending alpha's upstream salt as its own still lands somewhere else
    assert sent_salt(gateway, fake, "beta", plain) != plain


def test_no_salt_a_share_mode_client_sends_reaches_an_isolated_tenants_blocks(gateway: str, fake: FakeServer) -> None:
    """The attack: a client of a share-mode tenant sends the salt alpha's blocks are cached under."""
    alpha = sent_salt(gateway, fake, "alpha")
    assert alpha is not None
    alpha_split = sent_salt(gateway, fake, "alpha", "user-1")
    public_formula = hashlib.sha256(b"prefixgate tenant cache salt\0alpha").hexdigest()[:32]
    guesses = [alpha, alpha_split, public_formula, alpha.upper(), f"{alpha} ", "alpha", SHARED_PREFIX + alpha,
               SHARED_PREFIX, tenant_salt(b"", "alpha")]
    reached = {sent_salt(gateway, fake, "public", guess) for guess in guesses}
    assert not reached & {alpha, alpha_split}
    assert all(salt is not None and salt.startswith(SHARED_PREFIX) for salt in reached)
    assert len(reached) == len(guesses)  # each guess its own cache space: none is passed through


def test_share_mode_tenants_share_one_salt_per_client_salt(gateway: str, fake: FakeServer) -> None:
    assert sent_salt(gateway, fake, "public") == sent_salt(gateway, fake, "docs")
    assert sent_salt(gateway, fake, "public", "v2") == sent_salt(gateway, fake, "docs", "v2")
    assert sent_salt(gateway, fake, "public", "v2") != sent_salt(gateway, fake, "public")


def test_off_sends_no_salt_and_drops_the_clients(gateway: str, fake: FakeServer) -> None:
    assert upstream_body(gateway, fake, "plain", CHAT) == CHAT
    assert upstream_body(gateway, fake, "plain", {**CHAT, "cache_salt": "mine"}) == CHAT
    streamed = upstream_body(gateway, fake, "plain", {**CHAT, "cache_salt": "mine", "stream": True})
    assert streamed == {**CHAT, "stream": True, "stream_options": {"include_usage": True}}


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


def test_a_generated_secret_survives_restarts_and_differs_between_deployments(
        fake: FakeServer, start_proxy: Callable[..., str], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        first = start_proxy({**config(fake), "data_dir": str(tmp_path / "one")})
        salts = [sent_salt(first, fake, "alpha"), sent_salt(first, fake, "public")]
        secret = (tmp_path / "one" / SECRET_FILE).read_text().strip()
        assert (tmp_path / "one" / SECRET_FILE).stat().st_mode & 0o077 == 0  # readable by its owner alone
        again = start_proxy({**config(fake), "data_dir": str(tmp_path / "one")})  # a restart: same data_dir
        assert [sent_salt(again, fake, "alpha"), sent_salt(again, fake, "public")] == salts
        other = start_proxy({**config(fake), "data_dir": str(tmp_path / "two")})  # another deployment
        assert sent_salt(other, fake, "alpha") not in salts and sent_salt(other, fake, "public") not in salts
    assert salts[0] == salt_policy("isolate", secret.encode(), "alpha").own
    assert secret not in caplog.text and str(tmp_path / "one" / SECRET_FILE) in caplog.text


def test_a_configured_secret_gives_every_replica_the_same_salts(
        fake: FakeServer, start_proxy: Callable[..., str], tmp_path: Path) -> None:
    by_file = start_proxy({**config(fake, cache_salt_secret=SECRET), "data_dir": str(tmp_path / "a")})
    by_env = start_proxy({**config(fake, cache_salt_secret="x" * 16), "data_dir": str(tmp_path / "b")},
                         env={"PREFIXGATE_CACHE_SALT_SECRET": SECRET})  # the environment beats the file
    assert sent_salt(by_file, fake, "alpha") == sent_salt(by_env, fake, "alpha") == tenant_salt(SECRET.encode(),
                                                                                                   "alpha")
    assert not (tmp_path / "a" / SECRET_FILE).exists() and not (tmp_path / "b" / SECRET_FILE).exists()


def test_a_short_or_unusable_secret_is_a_start_up_error_that_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as short:
        make_config({}, env={"PREFIXGATE_CACHE_SALT_SECRET": "too-short-0"})
    assert "PREFIXGATE_CACHE_SALT_SECRET" in str(short.value) and "too-short-0" not in str(short.value)
    with pytest.raises(ConfigError) as in_file:
        make_config({"auth": {"cache_salt_secret": "too-short-1"}})
    assert "auth.cache_salt_secret" in str(in_file.value) and "too-short-1" not in str(in_file.value)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(SecretFileError) as unusable:
        deployment_secret(None, blocker)
    assert "auth.cache_salt_secret or PREFIXGATE_CACHE_SALT_SECRET" in str(unusable.value)


def test_worker_processes_get_the_secret_the_command_resolved() -> None:
    """``prefixgate serve --workers N`` resolves the secret once and hands it to each worker's config."""
    resolved = make_config({}, env={"PREFIXGATE_CACHE_SALT_SECRET": SECRET})
    assert config_from_dump(dump_config(resolved)).resolved_salt_secret == SECRET
    assert SECRET not in repr(resolved) and SECRET not in resolved.model_dump_json()
