"""The session a request names, for replica choice: an agent's session stays on one engine.

Every session of a coding agent shares the same long system prompt and tools, so a key made of the prompt's
first characters sends every session to one engine (the hot spot users report against other routers), where
the shared prefix is cached once and the sessions' own turns crowd each other out. Agents name their sessions:
Claude Code in ``X-Claude-Code-Session-Id`` and in ``metadata.user_id`` (JSON with a ``session_id``), Codex in
``session-id`` and ``prompt_cache_key``, which OpenAI's API takes from any client for exactly this: requests
that share it share a cache. Keyed by its session, a request goes to its session's engine under the ring's
load bound: the shared prefix is cached on every engine once, and each session's own turns stay on its engine.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_SESSION_CHARS = 256  # longer names are cut: a key needs no more, and a client cannot make the gateway hash more


def body_session(body: dict[str, Any]) -> str | None:
    """The session a body names: OpenAI's ``prompt_cache_key``, else Claude Code's ``metadata.user_id`` (its
    ``session_id`` where it is JSON; the string itself otherwise, which older versions make per session)."""
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key[:MAX_SESSION_CHARS]
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user, str) or not user:
        return None
    if user.startswith("{"):
        try:
            session = orjson.loads(user).get("session_id")
        except (orjson.JSONDecodeError, AttributeError):
            session = None
        if isinstance(session, str) and session:
            return session[:MAX_SESSION_CHARS]
    return user[:MAX_SESSION_CHARS]
