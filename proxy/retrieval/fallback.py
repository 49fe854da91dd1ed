"""When the model cannot answer, answer with the retrieved passages instead of an error.

For tenants that opt in (``tenants.<name>.retrieval.fallback``): a request whose retrieval
succeeded but whose upstream timed out, was unreachable or had no healthy replica gets an
ordinary chat completion (JSON or SSE, as asked) whose text lists the passages, and a header
``x-prefixgate-degraded`` naming why, so clients keep working and can tell.
"""

from __future__ import annotations

import time
import uuid

import orjson
from starlette.types import Send

from proxy.wire.headers import ResponseHeaders

LEAD = "The model could not answer right now. Passages from your documents that match the question:"


def _chunk(base: dict, delta: dict, finish: str | None) -> bytes:
    payload = {**base, "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def send_passages_answer(send: Send, *, model: str, evidence: str, stream: bool, reason: str) -> None:
    text = f"{LEAD}\n\n{evidence}"
    base = {"id": f"chatcmpl-prefixgate-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}
    headers = ResponseHeaders()
    headers.degraded(reason)
    if stream:
        body = (_chunk(base, {"role": "assistant", "content": ""}, None) + _chunk(base, {"content": text}, None)
                + _chunk(base, {}, "stop") + b"data: [DONE]\n\n")
        headers.append((b"content-type", b"text/event-stream; charset=utf-8"))
    else:
        body = orjson.dumps({**base, "object": "chat.completion", "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": "stop",
        }], "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
        headers.append((b"content-type", b"application/json"))
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
