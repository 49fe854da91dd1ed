"""The headers prefixgate reads from clients and adds to its answers: every ``x-prefixgate-*`` name is
declared here and nowhere else, and so are OpenAI's ``x-ratelimit-*``. ``RequestHeaders`` reads a generation
route's request headers from the raw ASGI list in one pass; ``ResponseHeaders`` is the one owner of what an
answer carries of prefixgate's own, each step reporting what it learned by name."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from starlette.types import Scope

from policies.refusals import LimitState
from policies.routing.sessions import MAX_SESSION_CHARS

# From clients.
API_KEY = b"x-api-key"  # Anthropic's clients send their key here rather than as Authorization: Bearer
API_KEY_NAME = API_KEY.decode()
RETRIEVAL = b"x-prefixgate-retrieval"  # "off": this request goes without added context
POOL = b"x-prefixgate-pool"  # the pool to use; in answers: the pool that took it
# The session an agent names (Claude Code's; the Codex CLI's, in both spellings): its replica (``session_key``).
SESSION_HEADERS = (b"x-claude-code-session-id", b"session-id", b"session_id")
TENANT = b"x-prefixgate-tenant"  # the admin's route explain: whose request this is
# In answers.
OVERFLOW = b"x-prefixgate-overflow"  # the pool that shed the request to the one that took it
VOLATILE = b"x-prefixgate-volatile"  # volatile spans found in the prompt
RELOCATED = b"x-prefixgate-relocated"  # of them, moved out of the prefix to the note
TEMPLATED = b"x-prefixgate-templated"  # system text made the tenant's canonical preamble
PASSAGES = b"x-prefixgate-passages"  # passages retrieval added, or "error"
ANSWER_CACHE = b"x-prefixgate-answer-cache"  # "hit" (replayed) or "miss" (stored once answered)
DEGRADED = b"x-prefixgate-degraded"  # answered with the retrieved passages instead, and why
OUTPUT_CLAMPED = b"x-prefixgate-output-clamped"  # the output cap, lowered to what the engine's context holds
SERVER_TIMING = b"server-timing"  # retrieval's stages
# OpenAI's, for each of a tenant's rate limits: its size per minute, what is left of it, when it has room again.
RATELIMIT: dict[str, tuple[bytes, bytes, bytes]] = {
    "requests": (b"x-ratelimit-limit-requests", b"x-ratelimit-remaining-requests", b"x-ratelimit-reset-requests"),
    "tokens": (b"x-ratelimit-limit-tokens", b"x-ratelimit-remaining-tokens", b"x-ratelimit-reset-tokens"),
}


def authorization_of(authorization: str | None, api_key: str | None) -> str | None:
    """The request's key as an ``Authorization`` value: that header where sent, else ``x-api-key`` as a bearer key,
    so a key finds its tenant however the client sends it."""
    if authorization is None and api_key is not None:
        return "Bearer " + api_key.strip()
    return authorization


def request_authorization(headers: Mapping[str, str]) -> str | None:
    """``authorization_of`` a Starlette request's headers (the light routes)."""
    return authorization_of(headers.get("authorization"), headers.get(API_KEY_NAME))


@dataclass(slots=True)
class RequestHeaders:
    """The request headers the gateway reads, from the raw ASGI header list in one pass."""

    authorization: str | None = None  # or x-api-key's key, as ``authorization_of`` writes it
    length: bytes | None = None
    retrieval: bool = True  # not turned off by x-prefixgate-retrieval
    pool: str | None = None  # the pool x-prefixgate-pool names
    session: str | None = None  # the session an agent's header names

    @classmethod
    def of(cls, scope: Scope) -> RequestHeaders:
        authorization = api_key = length = pool = session = None
        retrieval = True
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == API_KEY:
                api_key = value.decode("latin-1")
            elif name == b"content-length":
                length = value
            elif name == RETRIEVAL:
                retrieval = value.strip().lower() != b"off"
            elif name == POOL:
                pool = value.decode("latin-1").strip()
            elif name in SESSION_HEADERS:
                session = value.decode("latin-1").strip()[:MAX_SESSION_CHARS] or None
        return cls(authorization_of(authorization, api_key), length, retrieval, pool, session)


class ResponseHeaders(list[tuple[bytes, bytes]]):
    """prefixgate's own headers on one answer, as the steps of its request report them; whatever starts
    the answer (the relay, a keep-alive, the answer cache's replay) sends them as they stand. A list, so
    sending them costs nothing more than before; written only through these methods."""

    __slots__ = ()

    def prompt_rewrite(self, detected: int, moved: int, templated: int) -> None:
        self += ((VOLATILE, str(detected).encode()), (RELOCATED, str(moved).encode()),
                 (TEMPLATED, str(templated).encode()))

    def retrieval(self, passages: int | None, server_timing: bytes) -> None:
        """How many passages went in (None: retrieval failed and the request went on without)."""
        self += ((PASSAGES, b"error" if passages is None else str(passages).encode()), (SERVER_TIMING, server_timing))

    def rate_limits(self, states: Iterable[LimitState]) -> None:
        """OpenAI's ``x-ratelimit-*`` headers for the tenant's limits (``ratelimit_headers``)."""
        self += ratelimit_headers(states)

    def pool(self, name: str) -> None:
        self.append((POOL, name.encode()))

    def overflowed(self, shed_by: str, taken_by: str) -> None:
        """The pool ``shed_by`` shed the request to ``taken_by``: the answer names both."""
        self[:] = [header for header in self if header[0] != POOL]
        self += ((POOL, taken_by.encode()), (OVERFLOW, shed_by.encode()))

    def answer_cache(self, hit: bool) -> None:
        self.append((ANSWER_CACHE, b"hit" if hit else b"miss"))

    def degraded(self, reason: str) -> None:
        self.append((DEGRADED, reason.encode()))

    def output_clamped(self, cap: int | None) -> None:
        """The output cap sent, where it was lowered to fit the pool's context (``fit_output``); None: it was not.
        A request planned again for another pool (an overflow) says what that pool's plan did."""
        self[:] = [header for header in self if header[0] != OUTPUT_CLAMPED]
        if cap is not None:
            self.append((OUTPUT_CLAMPED, str(cap).encode()))


def reset_text(seconds: float) -> str:
    """OpenAI's x-ratelimit-reset-* form: "20ms", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    return f"{int(seconds // 60)}m{int(seconds % 60)}s"


def ratelimit_headers(states: Iterable[LimitState]) -> list[tuple[bytes, bytes]]:
    """OpenAI's x-ratelimit-* headers for each of a tenant's limits, in order (requests first): on every answer
    of a limited tenant, and its 429s."""
    headers = []
    for state in states:
        limit, remaining, reset = RATELIMIT[state.unit]
        headers += [(limit, str(state.limit).encode()), (remaining, str(state.remaining).encode()),
                    (reset, reset_text(state.reset).encode())]
    return headers
