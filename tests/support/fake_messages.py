"""The fake upstream's Anthropic Messages API (``POST /v1/messages``), framed as vLLM frames it: a whole message,
or SSE events (``message_start`` ... ``message_stop``), ``max_tokens`` tokens of " tok" each; a stand-in usage
(``prompt_tokens``, which ``/v1/messages/count_tokens`` answers)."""

from __future__ import annotations

import uuid
from typing import Any

import orjson


def _event(name: str, **data: Any) -> bytes:
    return f"event: {name}\ndata: ".encode() + orjson.dumps({"type": name, **data}) + b"\n\n"


def prompt_tokens(request: dict[str, Any]) -> int:
    """A stand-in count: a token per 4 bytes of the turns and system text."""
    return max(1, (len(orjson.dumps(request.get("messages"))) + len(orjson.dumps(request.get("system")))) // 4)


def message(request: dict[str, Any], tokens: int) -> dict[str, Any]:
    prompt = prompt_tokens(request)
    return {"id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant", "model": request.get("model"),
            "content": [{"type": "text", "text": " tok" * tokens}], "stop_reason": "max_tokens",
            "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": tokens}}


def stream_events(request: dict[str, Any], tokens: int) -> list[bytes]:
    whole = message(request, tokens)
    usage = whole["usage"]
    events = [_event("message_start", message={**whole, "content": [], "stop_reason": None,
                                               "usage": {**usage, "output_tokens": 0}}),
              _event("content_block_start", index=0, content_block={"type": "text", "text": ""})]
    events += [_event("content_block_delta", index=0, delta={"type": "text_delta", "text": " tok"})
               for _ in range(tokens)]
    events += [_event("content_block_stop", index=0),
               _event("message_delta", delta={"stop_reason": "max_tokens", "stop_sequence": None}, usage=usage),
               _event("message_stop")]
    return events
