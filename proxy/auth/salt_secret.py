"""The deployment's cache-salt secret: configured, or generated once into the data directory.

Every ``cache_salt`` prefixgate sends is keyed with it (``policies.prompt.cache_salt``), so it must stay the same
across restarts (or every restart starts the engines' prefix caches cold for every tenant) and be the
same on every gateway replica in front of the same engines. A configured one
(``auth.cache_salt_secret`` or ``$PREFIXGATE_CACHE_SALT_SECRET``) wins; without one, the first process
to start writes a random one to ``SECRET_FILE`` in the data directory and every later start, and every
worker process beside it, reads that file. It is never logged.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

log = logging.getLogger("prefixgate")

SECRET_FILE = "cache_salt_secret"


class SecretFileError(Exception):
    """The generated secret can be neither read nor written: the operator must configure one."""


def deployment_secret(configured: str | None, data_dir: str | Path) -> bytes:
    """The secret as bytes: ``configured`` if given, else the data directory's (created if absent)."""
    if configured is not None:
        return configured.encode()
    path = Path(data_dir) / SECRET_FILE
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        raise _unusable(path, error) from None
    try:
        _create(path)
        return _read(path)
    except OSError as error:
        raise _unusable(path, error) from None


def _read(path: Path) -> bytes:
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 16:
        raise OSError(f"it holds {len(text)} characters, fewer than 16")
    return text.encode()


def _create(path: Path) -> None:
    """Write a new secret unless another process got there first; a reader never sees half a file.

    The secret goes to a private temporary file that is then hard-linked to its name: ``link`` fails if
    the name exists, so of several workers starting at once exactly one secret wins, whole.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(secrets.token_hex(32) + "\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return
        log.warning("generated a cache-salt secret in %s; gateway replicas in front of the same engines need the "
                    "same one (copy it, or set auth.cache_salt_secret or PREFIXGATE_CACHE_SALT_SECRET)", path)
    finally:
        temporary.unlink(missing_ok=True)


def _unusable(path: Path, error: OSError) -> SecretFileError:
    reason = error.strerror or str(error)
    return SecretFileError(f"cannot use the generated cache-salt secret {path} ({reason}): set "
                           "auth.cache_salt_secret or PREFIXGATE_CACHE_SALT_SECRET (16 characters or more)")
