"""cache_salt against the real engine: a tenant reuses its own cached prefix, never another tenant's.

vLLM counts prefix-cache hits in tokens (vllm:prefix_cache_hits_total); its CPU blocks hold 128
tokens, so the shared system prompt here is several blocks long.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable

import httpx
import pytest

from policies.prompt.cache_salt import SHARED_PREFIX, salt_policy, tenant_salt
from tests.support.configs import pool
from tests.support.embedded import Embedded
from tests.support.metrics_text import sample_sum

pytestmark = pytest.mark.engine

KEYS = {"alpha": "key-alpha-123", "beta": "key-beta-4567", "docs-a": "key-docs-a-89", "docs-b": "key-docs-b-12"}
SECRET = "engine-test-salt-secret"


def hits(embedded: Embedded) -> float:
    return sample_sum(httpx.get(embedded.engine + "/metrics").text, "vllm:prefix_cache_hits_total")


def test_isolated_tenants_never_share_cached_blocks_and_shared_ones_do(
        embedded: Embedded, start_proxy: Callable[..., str]) -> None:
    gateway = start_proxy({
        "pools": [pool("engine", embedded.engine + "/v1", models=[embedded.model])],
        "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()], "cache_salt_secret": SECRET},
        "tenants": {"docs-a": {"prompt": {"cache_salt": "share"}}, "docs-b": {"prompt": {"cache_salt": "share"}}},
    })

    def ask(tenant: str, system: str, salt: str | None = None) -> float:
        """Send one request (with ``salt`` as the client's cache_salt); return the prefix-cache hit tokens it got."""
        before = hits(embedded)
        extra = {} if salt is None else {"cache_salt": salt}
        answer = httpx.post(gateway + "/v1/chat/completions", timeout=60,
                            headers={"Authorization": f"Bearer {KEYS[tenant]}"},
                            json={"model": embedded.model, "max_tokens": 1, **extra, "messages": [
                                {"role": "system", "content": system}, {"role": "user", "content": "Hi"}]})
        assert answer.status_code == 200, answer.text
        return hits(embedded) - before

    rules = "\n".join(f"Rule {n}: answer questions about topic {n} with care and cite the source." for n in range(40))
    private = f"Run {uuid.uuid4().hex[:8]}.\n{rules}"  # fresh text: nothing cached from earlier tests
    assert ask("alpha", private) == 0
    assert ask("alpha", private) >= 256  # its own prefix: at least two full blocks
    assert ask("beta", private) == 0  # same prompt, other tenant: isolated by its salt

    # The share-mode attack: docs-a's clients send every salt alpha's blocks could be cached under
    # (alpha's real salt, known here because the test holds the secret, and the forms anyone can compute).
    # Each is a new salt to the engine, so none of them may hit: not alpha's blocks, not each other's.
    alpha_salt = tenant_salt(SECRET.encode(), "alpha")
    guesses = [alpha_salt, salt_policy("isolate", SECRET.encode(), "alpha").upstream_salt("x"),
               hashlib.sha256(b"prefixgate tenant cache salt\0alpha").hexdigest()[:32], "alpha",
               SHARED_PREFIX + alpha_salt, alpha_salt.upper()]
    assert [ask("docs-a", private, guess) for guess in guesses] == [0] * len(guesses)
    assert [ask("beta", private, guess) for guess in guesses[:2]] == [0, 0]
    assert ask("alpha", private) >= 256  # alpha's blocks were there all along

    public = f"Public {uuid.uuid4().hex[:8]}.\n{rules}"
    assert ask("docs-a", public) == 0
    assert ask("docs-b", public) >= 256  # both tenants share the deployment's shared salt: one cached prefix
