"""An OpenAI-compatible engine in memory, for ``MockUpstreams``: the answers a vLLM replica gives, without one.

``MockEngine`` is a ``Handler``: it answers chat and completions requests whole (JSON with its usage) or, when
the body asks for a stream, as SSE events; embeddings with an empty list. Tests of the network itself (slow
reads, killed upstreams, misbehaving engines) use the fake server over a socket (``fake_upstream``) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tests.support.mock_transport import MockReply

DONE = b"data: [DONE]\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_completion(content: str = "hi", model: str = "m", prompt_tokens: int = 5,
                    completion_tokens: int = 1) -> MockReply:
    """A whole chat completion as vLLM answers one."""
    return MockReply.json({
        "id": "chatcmpl-mock", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": usage(prompt_tokens, completion_tokens),
    })


def event(data: dict[str, Any]) -> bytes:
    """One SSE event as vLLM frames it."""
    return b"data: " + orjson.dumps(data) + b"\n\n"


@dataclass(frozen=True)
class MockEngine:
    """An engine that answers every request with ``content``, and counts ``prompt_tokens`` and
    ``completion_tokens`` for it.

    A stream is the assistant's role (chat), the content, the finish (``stop``), then the usage event when the
    body asks for it (``stream_options.include_usage``, which the gateway asks for on every stream), then
    ``[DONE]``. A GET (``/v1/models``, ``/kv_event_sources``, ``/metrics``) gets a 404, as from an engine that
    serves none of them: pools in tests name their models and read no engine metrics."""

    content: str = "hi"
    prompt_tokens: int = 5
    completion_tokens: int = 1
    model: str = "m"

    def __call__(self, url: str, body: bytes) -> MockReply:
        if not body:
            return MockReply(404)
        if url.endswith("/embeddings"):
            return MockReply.json({"object": "list", "data": [], "model": self.model})
        request = orjson.loads(body)
        chat = not url.endswith("/completions") or url.endswith("/chat/completions")
        if not request.get("stream"):
            return self._chat() if chat else self._completion()
        chunks = self._chat_events() if chat else self._completion_events()
        if (request.get("stream_options") or {}).get("include_usage"):
            kind = "chat.completion.chunk" if chat else "text_completion"
            chunks.append(event({"id": "c", "object": kind, "model": self.model, "choices": [],
                                 "usage": usage(self.prompt_tokens, self.completion_tokens)}))
        return MockReply(200, [*chunks, DONE], content_type="text/event-stream")

    def _chat(self) -> MockReply:
        return chat_completion(self.content, self.model, self.prompt_tokens, self.completion_tokens)

    def _completion(self) -> MockReply:
        return MockReply.json({
            "id": "cmpl-mock", "object": "text_completion", "model": self.model,
            "choices": [{"index": 0, "text": self.content, "finish_reason": "stop"}],
            "usage": usage(self.prompt_tokens, self.completion_tokens),
        })

    def _chat_events(self) -> list[bytes]:
        return [self._chat_event({"role": "assistant", "content": ""}), self._chat_event({"content": self.content}),
                self._chat_event({}, "stop")]

    def _chat_event(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return event({"id": "c", "object": "chat.completion.chunk", "model": self.model, "choices": [choice]})

    def _completion_events(self) -> list[bytes]:
        return [event({"id": "c", "object": "text_completion", "model": self.model,
                       "choices": [{"index": 0, "text": text, "finish_reason": finish}]})
                for text, finish in ((self.content, None), ("", "stop"))]
