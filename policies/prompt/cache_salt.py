"""Which ``cache_salt`` vLLM gets: who may share cached prefixes with whom.

vLLM mixes the salt into the hash of a prompt's first KV block, so only requests with the same salt
can hit each other's cached prefixes. A shared cache leaks: a tenant that times its own requests
can tell whether someone else recently sent a given prefix.

Every salt prefixgate sends is an HMAC under the deployment's secret, so nobody outside the deployment
can compute one, and two deployments in front of one engine never meet by accident. The three modes:

- ``isolate`` (the default): each tenant has its own salt, derived from the secret and its name (so every
  gateway replica with the same secret sends the same one, and a restart keeps the cache warm); a salt
  the client sends is mixed into it, so a client can split its own traffic further but never reach
  another tenant's blocks.
- ``share``: for tenants whose preambles are public and meant to be cached once for all. Every
  share-mode tenant of the deployment sends the same salt for the same client salt (none counts as one
  more value), and those salts carry ``SHARED_PREFIX``, which no derived salt (hex digits only) starts
  with: whatever a share-mode client sends, it lands in the shared namespace, never in a tenant's own.
- ``off``: no salt at all, and a client's is dropped, for engines that do not know the field. Unsalted
  requests share blocks only with other unsalted ones, never with a salted tenant's.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

CacheMode = Literal["isolate", "share", "off"]

SALT_CHARS = 32  # hex characters of an HMAC-SHA256 kept: 128 bits
SHARED_PREFIX = "shared-"  # begins every share-mode salt; a hex-only derived salt never does


def _mac(secret: bytes, *parts: str) -> str:
    message = b"\0".join(part.encode() for part in parts)
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[:SALT_CHARS]


def tenant_salt(secret: bytes, tenant: str) -> str:
    """A tenant's own salt: the same wherever ``secret`` is, and computable by no one without it."""
    return _mac(secret, "tenant", tenant)


@dataclass(frozen=True, slots=True)
class SaltPolicy:
    """One tenant's rule, decided once at start-up; ``upstream_salt`` is called per request."""

    mode: CacheMode
    secret: bytes
    own: str  # the tenant's derived salt (unused outside ``isolate``, kept for its tests and callers)

    def upstream_salt(self, client_salt: str | None) -> str | None:
        """The salt to send upstream for a request that carried ``client_salt`` (None: send none)."""
        if self.mode == "isolate":
            return self.own if client_salt is None else _mac(self.secret, "client", self.own, client_salt)
        if self.mode == "share":
            # "absent" and each client value map to distinct inputs: "-" can never equal "+" + value
            return SHARED_PREFIX + _mac(self.secret, "shared", "-" if client_salt is None else "+" + client_salt)
        return None


def salt_policy(mode: CacheMode, secret: bytes, tenant: str) -> SaltPolicy:
    return SaltPolicy(mode, secret, tenant_salt(secret, tenant))
