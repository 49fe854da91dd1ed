"""Stored whole answers for tenants that opt in (``cacheable`` and ``storable`` say what qualifies).

In process, on aiocache's memory backend, with a TTL per tenant; with ``redis`` configured, shared
by every gateway replica (``tiered_cache``), so a repeat is a hit whichever replica it reaches.
Replays (``stored_answer``, sent by the request's ``ClientAnswer``) carry the header
``x-prefixgate-answer-cache: hit`` and never reach a replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from policies.answers.answer_cache import CHAT, TEXT, stream_from_completion
from proxy.caches.tiered import TieredCache


class AnswerStore:
    def __init__(self, store: TieredCache) -> None:
        self._store = store

    async def get(self, key: str) -> dict[str, Any] | None:
        return await self._store.get(key)

    async def put(self, key: str, completion: dict[str, Any], ttl: float) -> None:
        await self._store.put(key, completion, ttl)

    async def aclose(self) -> None:
        await self._store.aclose()


@dataclass(frozen=True, slots=True)
class AnswerToStore:
    """Where one request's answer goes, if it turns out worth replaying."""

    store: AnswerStore
    key: str
    ttl: float

    async def put(self, completion: dict[str, Any] | None) -> None:
        if completion is not None and storable(completion):
            await self.store.put(self.key, completion, self.ttl)


def storable(completion: dict[str, Any]) -> bool:
    """One plain text answer that ended normally, in a shape the replay knows (a chat completion's message
    without tool calls, a completion's text): worth replaying."""
    choices = completion.get("choices") or []
    if len(choices) != 1 or choices[0].get("finish_reason") not in ("stop", "length"):
        return False
    kind, choice = completion.get("object"), choices[0]
    if kind == TEXT:
        return isinstance(choice.get("text"), str)
    message = choice.get("message")
    return kind == CHAT and isinstance(message, dict) and not message.get("tool_calls")


def stored_answer(completion: dict[str, Any], *, stream: bool, include_usage: bool) -> bytes:
    """A stored answer as the client asked for it: its SSE events (``stream``) or its JSON."""
    return stream_from_completion(completion, include_usage) if stream else orjson.dumps(completion)
