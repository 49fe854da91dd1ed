"""When the model cannot answer, answer with the retrieved passages instead of an error.

For tenants that opt in (``tenants.<name>.retrieval.fallback``): a request whose retrieval succeeded but
whose upstream timed out, was unreachable or had no healthy replica gets an ordinary chat completion (JSON
or SSE, as asked) whose text lists the passages; the call sends it with the answer's headers and
``x-prefixgate-degraded`` naming why, so clients keep working and can tell.
"""

from __future__ import annotations

import orjson

LEAD = "The model could not answer right now. Passages from your documents that match the question:"


def _chunk(base: dict[str, object], delta: dict[str, str], finish: str | None) -> bytes:
    payload = {**base, "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def passages_answer(evidence: str, *, model: str, stream: bool, answer_id: str, created: int) -> bytes:
    """The chat completion that lists ``evidence``: its SSE events (``stream``) or its JSON."""
    text = f"{LEAD}\n\n{evidence}"
    base: dict[str, object] = {"id": answer_id, "created": created, "model": model}
    if stream:
        return (_chunk(base, {"role": "assistant", "content": ""}, None) + _chunk(base, {"content": text}, None)
                + _chunk(base, {}, "stop") + b"data: [DONE]\n\n")
    return orjson.dumps({**base, "object": "chat.completion", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": "stop",
    }], "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
