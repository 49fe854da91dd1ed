"""The `auth` section of the configuration: API keys and their tenants, the admin key, the cache-salt secret."""

from __future__ import annotations

from pydantic import Field, model_validator

from proxy.config.frozen import Frozen as _Frozen


class TenantKey(_Frozen):
    """One API key. ``key_env`` keeps the secret out of the file; exactly one of the two is set."""

    tenant: str = Field(min_length=1)
    """the tenant this key authenticates as"""
    key: str | None = Field(None, min_length=8, repr=False)
    """the secret clients send as `Authorization: Bearer <key>` or as `x-api-key: <key>` (as Anthropic's clients
    do), at least 8 characters"""
    key_env: str | None = None
    """the environment variable that holds the secret instead (keeps it out of the file); exactly one of `key` and
    `key_env`"""

    @model_validator(mode="after")
    def _one_source(self) -> TenantKey:
        if (self.key is None) == (self.key_env is None):
            raise ValueError("set exactly one of 'key' or 'key_env'")
        return self


class AuthConfig(_Frozen):
    """No keys means open mode: every request is the 'default' tenant (sidecar on loopback)."""

    keys: list[TenantKey] = Field(default_factory=list)
    """API keys, each `{tenant, key}` or `{tenant, key_env}`. Empty: open mode, every request is tenant `default`
    (prefixgate warns when open mode listens on a non-loopback address)"""
    admin_key: str | None = Field(None, min_length=8, repr=False)
    """when set, /metrics (tenant names, replica addresses, traffic) and the replica list of /ready answer only
    requests that send `Authorization: Bearer <admin_key>`; /health and /ready's status stay open for probes.
    Unset: open, as suits a sidecar whose port only its pod reaches"""
    admin_key_env: str | None = None
    """the environment variable that holds the admin key instead (at most one of the two)"""

    cache_salt_secret: str | None = Field(None, min_length=16, repr=False)
    """the key every vLLM `cache_salt` is derived with (see `prompt.cache_salt`); give every gateway replica in front
    of the same engines the same one, so they send the same salts. `$PREFIXGATE_CACHE_SALT_SECRET` beats it. Unset:
    one is generated into `data_dir` on first start and read from there after, so restarts keep the cache warm"""

    @model_validator(mode="after")
    def _one_admin_key(self) -> AuthConfig:
        if self.admin_key is not None and self.admin_key_env is not None:
            raise ValueError("set at most one of 'admin_key' or 'admin_key_env'")
        return self
