"""cache_salt per tenant: isolated by default, shared in a namespace of its own, off when asked; salts are
keyed with the deployment's secret, which survives restarts and is never written anywhere but its file.

The gateway runs in memory (``in_memory_gateway``); what the engine received is what ``MockUpstreams``
recorded."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from policies.prompt.cache_salt import SHARED_PREFIX, salt_policy, tenant_salt
from proxy.app import create_app
from proxy.auth.salt_secret import SECRET_FILE, SecretFileError, deployment_secret
from proxy.config.load import ConfigError, config_from_dump, dump_config
from tests.support.chat_body import chat_body
from tests.support.clock import FakeClock
from tests.support.configs import make_config, pool
from tests.support.in_memory import in_memory_gateway
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockUpstreams

CHAT = chat_body(model="fake-model", max_tokens=2)
KEYS = {"alpha": "key-alpha-123", "beta": "key-beta-4567", "public": "key-public-89", "docs": "key-docs-0123",
        "plain": "key-plain-456"}
SECRET = "salt-secret-for-tests-0123"
ENGINE = "http://engine:8000/v1"


def config(**auth: Any) -> dict[str, Any]:
    return {
        "pools": [pool("main", ENGINE)],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()], **auth},
        "tenants": {"public": {"prompt": {"cache_salt": "share"}}, "docs": {"prompt": {"cache_salt": "share"}},
                    "plain": {"prompt": {"cache_salt": "off"}}},
    }


@dataclass
class Gateway:
    """An in-memory gateway and the engine behind it, which records every body it is sent."""

    client: TestClient
    upstreams: MockUpstreams

    def upstream_body(self, tenant: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> dict[str, Any]:
        """The body the engine received for ``body`` sent as ``tenant``."""
        answer = self.client.post(path, json=body, headers={"Authorization": f"Bearer {KEYS[tenant]}"})
        assert answer.status_code == 200, answer.text
        sent: dict[str, Any] = orjson.loads(self.upstreams.posts()[-1].body)
        return sent

    def sent_salt(self, tenant: str, client_salt: str | None = None) -> str | None:
        body = CHAT if client_salt is None else {**CHAT, "cache_salt": client_salt}
        return self.upstream_body(tenant, body).get("cache_salt")


@contextmanager
def salted(data_dir: Path, env: dict[str, str] | None = None, **auth: Any) -> Iterator[Gateway]:
    """A gateway on ``config(**auth)`` keeping its state in ``data_dir``, built with ``env`` as its
    environment (``in_memory_gateway`` builds with none)."""
    upstreams = MockUpstreams(MockEngine())
    if env is None:
        with in_memory_gateway(config(**auth), upstreams, FakeClock(), data_dir) as client:
            yield Gateway(client, upstreams)
        return
    built = make_config({**config(**auth), "data_dir": str(data_dir)}, env)
    with TestClient(create_app(built, transports=upstreams, clock=FakeClock())) as client:
        yield Gateway(client, upstreams)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with salted(tmp_path, cache_salt_secret=SECRET) as started:
        yield started


def test_each_tenant_gets_its_own_stable_salt(gateway: Gateway) -> None:
    alpha = gateway.upstream_body("alpha", CHAT)
    beta = gateway.upstream_body("beta", CHAT)
    assert alpha["cache_salt"] != beta["cache_salt"]
    assert alpha["cache_salt"] == tenant_salt(SECRET.encode(), "alpha")
    assert gateway.upstream_body("alpha", CHAT)["cache_salt"] == alpha["cache_salt"]
    assert {k: v for k, v in alpha.items() if k != "cache_salt"} == CHAT  # nothing else touched


def test_a_client_salt_splits_a_tenant_but_cannot_reach_another(gateway: Gateway) -> None:
    plain = gateway.sent_salt("alpha")
    own = gateway.sent_salt("alpha", "user-1")
    assert own not in {plain, "user-1"}
    # beta sending alpha's upstream salt as its own still lands somewhere else
    assert gateway.sent_salt("beta", plain) != plain


def test_no_salt_a_share_mode_client_sends_reaches_an_isolated_tenants_blocks(gateway: Gateway) -> None:
    """The attack: a client of a share-mode tenant sends the salt alpha's blocks are cached under."""
    alpha = gateway.sent_salt("alpha")
    assert alpha is not None
    alpha_split = gateway.sent_salt("alpha", "user-1")
    public_formula = hashlib.sha256(b"prefixgate tenant cache salt\0alpha").hexdigest()[:32]
    guesses = [alpha, alpha_split, public_formula, alpha.upper(), f"{alpha} ", "alpha", SHARED_PREFIX + alpha,
               SHARED_PREFIX, tenant_salt(b"", "alpha")]
    reached = {gateway.sent_salt("public", guess) for guess in guesses}
    assert not reached & {alpha, alpha_split}
    assert all(salt is not None and salt.startswith(SHARED_PREFIX) for salt in reached)
    assert len(reached) == len(guesses)  # each guess its own cache space: none is passed through


def test_share_mode_tenants_share_one_salt_per_client_salt(gateway: Gateway) -> None:
    assert gateway.sent_salt("public") == gateway.sent_salt("docs")
    assert gateway.sent_salt("public", "v2") == gateway.sent_salt("docs", "v2")
    assert gateway.sent_salt("public", "v2") != gateway.sent_salt("public")


def test_off_sends_no_salt_and_drops_the_clients(gateway: Gateway) -> None:
    assert gateway.upstream_body("plain", CHAT) == CHAT
    assert gateway.upstream_body("plain", {**CHAT, "cache_salt": "mine"}) == CHAT
    streamed = gateway.upstream_body("plain", {**CHAT, "cache_salt": "mine", "stream": True})
    assert streamed == {**CHAT, "stream": True, "stream_options": {"include_usage": True}}


def test_completions_are_salted_too(gateway: Gateway) -> None:
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 2}
    chat_salt = gateway.upstream_body("alpha", CHAT)["cache_salt"]
    assert gateway.upstream_body("alpha", body, "/v1/completions")["cache_salt"] == chat_salt


@pytest.mark.parametrize("salt", ["", 5, ["x"]])
def test_bad_client_salt_is_a_400_naming_the_field(gateway: Gateway, salt: Any) -> None:
    answer = gateway.client.post("/v1/chat/completions", json={**CHAT, "cache_salt": salt},
                                 headers={"Authorization": f"Bearer {KEYS['alpha']}"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "cache_salt"


def test_a_generated_secret_survives_restarts_and_differs_between_deployments(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        with salted(tmp_path / "one") as first:
            salts = [first.sent_salt("alpha"), first.sent_salt("public")]
        secret = (tmp_path / "one" / SECRET_FILE).read_text().strip()
        assert (tmp_path / "one" / SECRET_FILE).stat().st_mode & 0o077 == 0  # readable by its owner alone
        with salted(tmp_path / "one") as again:  # a restart: same data_dir
            assert [again.sent_salt("alpha"), again.sent_salt("public")] == salts
        with salted(tmp_path / "two") as other:  # another deployment
            assert other.sent_salt("alpha") not in salts and other.sent_salt("public") not in salts
    assert salts[0] == salt_policy("isolate", secret.encode(), "alpha").own
    assert secret not in caplog.text and str(tmp_path / "one" / SECRET_FILE) in caplog.text


def test_a_configured_secret_gives_every_replica_the_same_salts(tmp_path: Path) -> None:
    with (salted(tmp_path / "a", cache_salt_secret=SECRET) as by_file,
          salted(tmp_path / "b", env={"PREFIXGATE_CACHE_SALT_SECRET": SECRET},  # the environment beats the file
                 cache_salt_secret="x" * 16) as by_env):
        assert by_file.sent_salt("alpha") == by_env.sent_salt("alpha") == tenant_salt(SECRET.encode(), "alpha")
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
