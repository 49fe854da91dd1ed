"""Which ``cache_salt`` vLLM gets: who may share cached prefixes with whom.

vLLM mixes the salt into the hash of a prompt's first KV block, so only requests with the same salt
can hit each other's cached prefixes. A shared cache leaks: a tenant that times its own requests
can tell whether someone else recently sent a given prefix. ``isolate`` (the default) gives each
tenant its own salt, derived from the tenant name so every gateway replica sends the same one; a
salt the client sends is mixed into it, so a client can split its own traffic further but never
reach another tenant's blocks. ``share`` sends the client's salt, if any, as is: for tenants
whose preambles are public and meant to be cached once for all.
"""

from __future__ import annotations

import hashlib
from typing import Literal

CacheMode = Literal["isolate", "share"]


def tenant_salt(tenant: str) -> str:
    """A tenant's own salt: stable across restarts and replicas, and no tenant can send it itself."""
    return hashlib.sha256(b"prefixgate tenant cache salt\0" + tenant.encode()).hexdigest()[:32]


def cache_salt(mode: CacheMode, tenant_salt_value: str, client_salt: str | None) -> str | None:
    """The salt to send upstream (None: send none)."""
    if mode == "share":
        return client_salt
    if client_salt is None:
        return tenant_salt_value
    return hashlib.sha256(f"{tenant_salt_value}\0{client_salt}".encode()).hexdigest()[:32]
