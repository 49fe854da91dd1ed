"""API key -> tenant. Keys are held only as SHA-256 digests and never logged.

Lookup is by digest rather than by comparing key strings, so the time it takes depends only on
the digest of the presented key, which an attacker cannot steer toward a real key byte by byte:
the same guarantee as hmac.compare_digest, with one hash and one dict probe for any number of keys.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from policies.refusals import Refused, Unauthorized
from proxy.config.gateway import OPEN_TENANT


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class KeyTable:
    def __init__(self, keys: Mapping[str, str], admin_key: str | None = None) -> None:
        self._tenants = {_digest(key): tenant for key, tenant in keys.items()}
        self._admin = _digest(admin_key) if admin_key is not None else None

    def is_admin(self, authorization: str | None) -> bool:
        """Whether the header carries the admin key (always true when none is configured)."""
        if self._admin is None:
            return True
        scheme, _, key = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(_digest(key.strip()), self._admin)

    @property
    def open_mode(self) -> bool:
        return not self._tenants

    def tenant_for(self, authorization: str | None) -> str:
        """Return the tenant for an ``Authorization`` header value, or raise the ``Unauthorized`` refusal."""
        if not self._tenants:
            return OPEN_TENANT
        if not authorization:
            raise Refused(Unauthorized("missing"))
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Refused(Unauthorized("malformed"))
        tenant = self._tenants.get(_digest(key.strip()))
        if tenant is None:
            raise Refused(Unauthorized("invalid"))
        return tenant
