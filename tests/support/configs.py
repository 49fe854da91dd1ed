"""Gateway configs for tests: a config dict built and checked as prefixgate builds one from YAML, and
the pool entries they hold."""

from __future__ import annotations

from typing import Any

from proxy.config.gateway import Config
from proxy.config.load import build_config


def make_config(data: dict[str, Any], env: dict[str, str] | None = None) -> Config:
    return build_config(data, env=env or {}, source="test config")


def pool(name: str, *replicas: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": list(replicas), **extra}
