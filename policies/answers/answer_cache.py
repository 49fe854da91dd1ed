"""Which answers may be reused, under what key, and how a stored answer is replayed.

Only deterministic requests qualify (temperature 0, one choice, no tools, no logprobs): for those
the engine would produce the same text again, so an exact repeat can skip the model. The key is
the tenant plus the request as it goes upstream (after canonicalization and retrieval), minus the
fields that change the framing of the answer but not its text (stream, stream_options, user).
A streamed answer is stored as the completion it adds up to, and a stored completion is replayed
as SSE chunks in the engine's format when the repeat asks for a stream.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

FRAMING_FIELDS = frozenset({"stream", "stream_options", "user"})


def cacheable(body: dict[str, Any]) -> bool:
    return (
        body.get("temperature") == 0
        and body.get("n", 1) in (1, None)
        and not body.get("tools")
        and not body.get("functions")
        and not body.get("logprobs")
    )


def answer_key(tenant: str, body: dict[str, Any]) -> str:
    request = {name: value for name, value in body.items() if name not in FRAMING_FIELDS}
    return hashlib.sha256(orjson.dumps([tenant, request], option=orjson.OPT_SORT_KEYS)).hexdigest()


CHAT, TEXT = "chat.completion", "text_completion"  # the two shapes an answer is stored and replayed in


def completion_from_stream(raw: bytes) -> dict[str, Any] | None:
    """The completion a finished SSE stream adds up to, in its own API's shape (chat's ``message``, or
    completions' ``text``: told by the chunks, which carry a ``delta`` or a ``text``); None if it is not
    one clean answer."""
    content: list[str] = []
    first: dict[str, Any] | None = None
    finish = None
    usage = None
    shape = CHAT
    for line in raw.split(b"\n"):
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        try:
            event = orjson.loads(line[6:])
        except orjson.JSONDecodeError:
            return None
        if "error" in event:
            return None
        first = first or event
        usage = event.get("usage") or usage
        for choice in event.get("choices") or []:
            if choice.get("index", 0) != 0:
                return None
            if "text" in choice:  # a completions chunk
                shape = TEXT
                content.append(choice.get("text") or "")
            else:
                delta = choice.get("delta") or {}
                if delta.get("tool_calls"):
                    return None
                content.append(delta.get("content") or "")
            finish = choice.get("finish_reason") or finish
    if first is None or finish is None:
        return None
    head = {"id": first.get("id"), "object": shape, "created": first.get("created"), "model": first.get("model")}
    text = "".join(content)
    if shape == TEXT:
        return {**head, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
                "usage": usage}
    return {**head, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "logprobs": None, "finish_reason": finish}], "usage": usage}


def stream_from_completion(completion: dict[str, Any], include_usage: bool) -> bytes:
    """SSE bytes for a stored completion, in its API's chunks: chat's role chunk, text and finish, or
    completions' text and finish; then usage if asked, and [DONE]."""
    text_shape = completion.get("object") == TEXT
    base = {"id": completion.get("id"), "object": TEXT if text_shape else "chat.completion.chunk",
            "created": completion.get("created"), "model": completion.get("model")}
    choice = completion["choices"][0]

    def event(part: dict[str, Any], finish: str | None) -> bytes:
        payload = {**base, "choices": [{"index": 0, **part, "logprobs": None, "finish_reason": finish}]}
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    if text_shape:
        out = event({"text": choice.get("text") or ""}, None) + event({"text": ""}, choice.get("finish_reason"))
    else:
        message = choice.get("message") or {}
        out = event({"delta": {"role": "assistant", "content": ""}}, None)
        if message.get("content"):
            out += event({"delta": {"content": message["content"]}}, None)
        out += event({"delta": {}}, choice.get("finish_reason") or "stop")
    if include_usage and completion.get("usage"):
        out += b"data: " + orjson.dumps({**base, "choices": [], "usage": completion["usage"]}) + b"\n\n"
    return out + b"data: [DONE]\n\n"
