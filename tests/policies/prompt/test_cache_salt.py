"""The salt rule: derived salts need the deployment's secret, and no share-mode salt can equal one."""

from __future__ import annotations

import hashlib
import re

from hypothesis import given
from hypothesis import strategies as st

from policies.prompt.cache_salt import SHARED_PREFIX, salt_policy, tenant_salt

SECRET = b"deployment-secret-0123456789"
HEX = re.compile(r"[0-9a-f]{32}")
NAMES = st.text(min_size=1, max_size=40)
CLIENT_SALTS = st.none() | st.text(min_size=1, max_size=80)


def test_a_derived_salt_depends_on_the_secret_not_on_the_name_alone() -> None:
    acme = tenant_salt(SECRET, "acme")
    assert acme == tenant_salt(SECRET, "acme") and HEX.fullmatch(acme)
    assert acme != tenant_salt(b"another-deployment-secret", "acme")  # two deployments never meet
    # the salt anyone could compute before the secret existed is not it
    public = hashlib.sha256(b"prefixgate tenant cache salt\0acme").hexdigest()[:32]
    assert acme != public


@given(NAMES, CLIENT_SALTS)
def test_an_isolated_tenant_always_sends_a_salt_of_its_own(tenant: str, client: str | None) -> None:
    policy = salt_policy("isolate", SECRET, tenant)
    salt = policy.upstream_salt(client)
    assert salt is not None and HEX.fullmatch(salt)
    assert salt == (policy.own if client is None else salt)
    if client is not None:
        assert salt != policy.own  # a client's salt splits the tenant's cache further
        assert salt != salt_policy("isolate", SECRET, tenant + "x").upstream_salt(client)


@given(NAMES, NAMES, CLIENT_SALTS)
def test_no_share_mode_salt_equals_any_derived_salt(sharer: str, victim: str, client: str | None) -> None:
    sent = salt_policy("share", SECRET, sharer).upstream_salt(client)
    assert sent is not None and sent.startswith(SHARED_PREFIX)
    derived = salt_policy("isolate", SECRET, victim)
    assert sent not in {derived.own, derived.upstream_salt(client), derived.upstream_salt(sent)}


def test_share_mode_tenants_share_per_client_salt_and_the_attack_lands_in_the_shared_space() -> None:
    docs_a, docs_b = salt_policy("share", SECRET, "docs-a"), salt_policy("share", SECRET, "docs-b")
    assert docs_a.upstream_salt(None) == docs_b.upstream_salt(None)
    assert docs_a.upstream_salt("v1") == docs_b.upstream_salt("v1") != docs_a.upstream_salt(None)
    acme = tenant_salt(SECRET, "acme")
    public = hashlib.sha256(b"prefixgate tenant cache salt\0acme").hexdigest()[:32]
    for guess in (acme, public, "acme", SHARED_PREFIX, docs_a.upstream_salt(None), acme.upper(), f" {acme}"):
        assert docs_a.upstream_salt(guess) != acme
    # a client sending the shared salt itself is hashed again, not passed through
    assert docs_a.upstream_salt(docs_a.upstream_salt(None)) != docs_a.upstream_salt(None)


@given(NAMES, CLIENT_SALTS)
def test_off_sends_no_salt_whatever_the_client_sends(tenant: str, client: str | None) -> None:
    assert salt_policy("off", SECRET, tenant).upstream_salt(client) is None
