"""Loading the configuration once at start-up, from YAML and the environment.

The environment is read here and nowhere else. Every validation error names the file, the
field path and what is wrong, so a bad deploy fails at start with a line a human can act on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import ValidationError

from proxy.config.gateway import Config
from proxy.config.pools import OpenAIPoolConfig, pool_kinds

ENV_CONFIG = "PREFIXGATE_CONFIG"
ENV_UPSTREAM = "PREFIXGATE_UPSTREAM"
ENV_PORT = "PREFIXGATE_PORT"
ENV_HOST = "PREFIXGATE_HOST"
ENV_DATA_DIR = "PREFIXGATE_DATA_DIR"
ENV_CACHE_SALT_SECRET = "PREFIXGATE_CACHE_SALT_SECRET"


class ConfigError(Exception):
    """A configuration problem, worded for the operator who has to fix it."""


def _field_path(location: tuple[Any, ...]) -> str:
    """``pools[0].replicas``: the pool kind pydantic puts after a pool's index (``PoolConfig``'s tag) is left out,
    as no one writes it there; an error about a field of another kind names the kinds itself."""
    path, kinds = "", pool_kinds()
    for number, part in enumerate(location):
        if isinstance(part, str) and part in kinds and number and isinstance(location[number - 1], int):
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top level)"


def _format_errors(source: str, error: ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for item in error.errors():
        lines.append(f"  {_field_path(item['loc'])}: {item['msg']}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Environment beats the file for the sidecar knobs, so one image serves many deployments."""
    data = dict(data)
    upstream = env.get(ENV_UPSTREAM, "").strip()
    if upstream:
        replicas = [url.strip() for url in upstream.split(",") if url.strip()]
        data["pools"] = [{"name": "default", "replicas": replicas}]
    server = dict(data.get("server") or {})
    if env.get(ENV_PORT):
        server["port"] = env[ENV_PORT]
    if env.get(ENV_HOST):
        server["host"] = env[ENV_HOST]
    if server:
        data["server"] = server
    if env.get(ENV_DATA_DIR):
        data["data_dir"] = env[ENV_DATA_DIR]
    return data


def _resolve_keys(config: Config, source: str, env: Mapping[str, str]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for index, entry in enumerate(config.auth.keys):
        secret = entry.key
        if entry.key_env is not None:
            secret = env.get(entry.key_env)
            if not secret:
                raise ConfigError(
                    f"{source}: auth.keys[{index}].key_env: environment variable {entry.key_env} is not set"
                )
        assert secret is not None
        if secret in keys:
            raise ConfigError(f"{source}: auth.keys[{index}]: the same key is given to two tenants")
        keys[secret] = entry.tenant
    return keys


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> Config:
    """Build the Config from an optional YAML file, the environment and CLI overrides (in that order)."""
    env = os.environ if env is None else env
    if path is None and env.get(ENV_CONFIG):
        path = env[ENV_CONFIG]
    data = _read_yaml(Path(path)) if path is not None else {}
    return build_config(data, env=env, source=str(path) if path is not None else "environment", overrides=overrides)


def build_config(data: Mapping[str, Any], *, env: Mapping[str, str], source: str = "config",
                 overrides: Mapping[str, Any] | None = None) -> Config:
    """Validate already-parsed settings; ``source`` names where they came from in error messages."""
    merged = _apply_env(dict(data), env)
    if overrides:
        server = dict(merged.get("server") or {})
        server.update({k: v for k, v in overrides.items() if v is not None})
        merged["server"] = server
    try:
        config = Config.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None
    keys = _resolve_keys(config, source, env)
    admin_key = config.auth.admin_key
    if config.auth.admin_key_env is not None:
        admin_key = env.get(config.auth.admin_key_env)
        if not admin_key:
            raise ConfigError(f"{source}: auth.admin_key_env: environment variable {config.auth.admin_key_env} "
                              "is not set")
    if admin_key is not None and admin_key in keys:
        raise ConfigError(f"{source}: auth.admin_key: a tenant's key cannot be the admin key")
    salt_secret = _resolve_salt_secret(config, source, env)
    return config.model_copy(update={"resolved_keys": keys, "resolved_admin_key": admin_key,
                                     "resolved_salt_secret": salt_secret})


def _resolve_salt_secret(config: Config, source: str, env: Mapping[str, str]) -> str | None:
    """The configured cache-salt secret, the environment's first; None: one generated into data_dir is used."""
    secret = env.get(ENV_CACHE_SALT_SECRET)
    if not secret:
        return config.auth.cache_salt_secret  # its length is checked by its field
    if len(secret) < 16:
        raise ConfigError(f"{source}: environment variable {ENV_CACHE_SALT_SECRET}: the cache-salt secret must be "
                          "at least 16 characters")
    return secret


def with_engine_pool(config: Config, base_url: str, model: str, model_dir: Path | None = None) -> Config:
    """The config the app runs with once the embedded engine is up: one pool pointing at it, which knows the
    engine's context (``max_model_len``) and gives requests that name no output cap the engine's default. The
    prompt is counted with the model's own tokenizer (in ``model_dir``) unless ``tokenizer`` names another: the
    estimate undercounts the tiny model's tokens (~1.7 characters each) more than twice over."""
    engine = config.engine
    pool = OpenAIPoolConfig(name="local", replicas=[base_url], models=[model], max_model_len=engine.max_model_len,
                            max_tokens_default=engine.default_max_tokens)
    update: dict[str, Any] = {"pools": [pool]}
    own = model_dir / "tokenizer.json" if model_dir is not None else None
    if config.tokenizer is None and own is not None and own.is_file():
        update["tokenizer"] = str(own)
    return config.model_copy(update=update)


def dump_config(config: Config) -> str:
    """Serialize for worker processes (uvicorn --workers re-imports the app in each)."""
    payload = config.model_dump(mode="json")
    payload["resolved_keys"] = config.resolved_keys
    payload["resolved_admin_key"] = config.resolved_admin_key
    payload["resolved_salt_secret"] = config.resolved_salt_secret
    return orjson.dumps(payload).decode()


def config_from_dump(text: str) -> Config:
    payload = orjson.loads(text)
    keys = payload.pop("resolved_keys", {})
    admin_key = payload.pop("resolved_admin_key", None)
    salt_secret = payload.pop("resolved_salt_secret", None)
    return Config.model_validate(payload).model_copy(update={"resolved_keys": keys, "resolved_admin_key": admin_key,
                                                             "resolved_salt_secret": salt_secret})
