"""The config a command reads, or its error in one line: what `ingest`, `migrate-store` and `analyze` share."""

from __future__ import annotations

import sys

from proxy.config.gateway import Config
from proxy.config.load import ConfigError, load_config


def config_or_report(path: str | None, command: str) -> Config | None:
    """The config from ``path`` (else the environment), or None once its error is printed as
    ``prefixgate <command>: <error>``; the caller then exits 2."""
    try:
        return load_config(path)
    except ConfigError as error:
        print(f"prefixgate {command}: {error}", file=sys.stderr)
        return None
