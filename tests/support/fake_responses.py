"""The fake upstream's Responses API (``POST /v1/responses``), framed as vLLM frames it: a whole response
object, or SSE events (``event: response.created`` ... ``event: response.completed``, no ``[DONE]``).

Like vLLM without a response store of its own, it refuses a ``previous_response_id``: the gateway must
send the whole conversation instead. The answer's text is ``fake_text`` (default " tok" per output
token); ``fake-nodone`` streams without its last event.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson


def input_tokens(request: dict[str, Any]) -> int:
    """A stand-in count: the request's input and instructions, one token per four bytes."""
    return max(1, (len(orjson.dumps(request.get("input"))) + len(request.get("instructions") or "")) // 4)


def response_object(request: dict[str, Any], tokens: int, status: str = "completed") -> dict[str, Any]:
    text = request.get("fake_text", " tok" * tokens)
    prompt = input_tokens(request)
    done = status == "completed"
    output = [{"id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant", "status": status,
               "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": None}]}] if done else []
    return {"id": "resp_" + uuid.uuid4().hex, "object": "response", "created_at": 1764000000,
            "instructions": request.get("instructions"), "model": request.get("model"), "output": output,
            "previous_response_id": None, "status": status, "tools": request.get("tools") or [],
            "max_output_tokens": request.get("max_output_tokens"),
            "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": tokens if done else 0, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": prompt + (tokens if done else 0)}}


def refusal(request: dict[str, Any]) -> tuple[int, bytes] | None:
    """What vLLM (no store of its own) answers a request it cannot serve, if this one is such."""
    previous = request.get("previous_response_id")
    if previous is None:
        return None
    error = {"message": f"Response with id '{previous}' not found.", "type": "invalid_request_error",
             "param": "previous_response_id", "code": 404}
    return 404, orjson.dumps({"error": error})


def event(kind: str, sequence: int, **data: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + orjson.dumps(
        {**data, "sequence_number": sequence, "type": kind}) + b"\n\n"


def stream_events(request: dict[str, Any], tokens: int) -> list[bytes]:
    """The events of a streamed response, the last ``response.completed`` (none for ``fake-nodone``)."""
    final = response_object(request, tokens)
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    events = [event("response.created", 0, response=started)]
    text = final["output"][0]["content"][0]["text"]
    pieces = [text[i:i + 4] for i in range(0, len(text), 4)] or [""]
    events += [event("response.output_text.delta", index + 1, item_id=final["output"][0]["id"], output_index=0,
                     content_index=0, delta=piece) for index, piece in enumerate(pieces)]
    if request.get("model") != "fake-nodone":
        events.append(event("response.completed", len(events), response=final))
    return events
