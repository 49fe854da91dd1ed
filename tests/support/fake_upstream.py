"""A fast fake OpenAI upstream for proxy-mechanics tests and the overhead benchmark.

It answers like vLLM's OpenAI server (same JSON and SSE framing) and can misbehave on request:
the model name picks a behaviour, extra body fields set sizes and delays. It never stands in
for the real engine in user-facing tests; those run against vLLM.

Behaviours by model name:
  fake-model        normal answer (``fake_tokens`` chunks, ``fake_delay_ms`` between them; a stream's
                    chunks carry ``fake_chunk_bytes`` characters each, when given)
  fake-hang         accepts the request and never answers
  fake-die          streams 3 chunks, then drops the connection
  fake-nodone       streams 3 chunks, then ends the body cleanly without [DONE]
  fake-400          answers 400 with an OpenAI error body (to test pass-through)
  fake-500          answers 500
  fake-slow-stream  waits ``fake_first_ms`` before the first chunk

``POST /v1/responses`` answers in the Responses API's framing (tests/support/fake_responses.py), ``POST
/v1/messages`` and ``/v1/messages/count_tokens`` in the Messages API's (tests/support/fake_messages.py).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import deque
from typing import Any

import orjson

from tests.support import fake_messages, fake_responses

Scope = dict[str, Any]

MODEL_NAMES = ["fake-model", "fake-hang", "fake-die", "fake-nodone", "fake-400", "fake-500", "fake-slow-stream"]


class Stats:
    """What the fake saw; tests read it over GET /_stats."""

    def __init__(self) -> None:
        self.requests = 0
        self.active = 0
        self.disconnects = 0
        self.completed = 0
        self.chunks_sent = 0  # content chunks of streams, handed to the server to send
        self.last_body: dict[str, Any] | None = None
        self.last_headers: dict[str, str] = {}
        self.recent_bodies: deque[dict[str, Any]] = deque(maxlen=1000)  # in-process tests read these

    def summary(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if name != "recent_bodies"}


def _chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1764000000,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _usage_chunk(prompt: int, completion: int) -> bytes:
    payload = {
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1764000000, "model": "fake-model",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


_ROLE_CHUNK = _chunk(0, {"role": "assistant", "content": ""})
_TOKEN_CHUNK = _chunk(0, {"content": " tok"})
_DONE = b"data: [DONE]\n\n"


def _completion(tokens: int, finish: str) -> bytes:
    return orjson.dumps({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1764000000,
        "model": "fake-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": " tok" * tokens},
            "logprobs": None,
            "finish_reason": finish,
        }],
        "usage": {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens},
    })


class FakeUpstream:
    def __init__(self, fail_status: int | None = None) -> None:
        self.stats = Stats()
        self.fail_status = fail_status  # answer every generation request with this error, as an engine shedding load
        self.serves_metrics = True  # GET /metrics answers in vLLM's names, else 404 as a non-vLLM upstream
        self.waiting = 0  # requests /metrics reports waiting, beside those it is really answering (running)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        if scope["method"] == "GET":
            await self._get(path, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        request = orjson.loads(body)
        self.stats.requests += 1
        self.stats.last_body = request
        self.stats.recent_bodies.append(request)
        self.stats.last_headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if path.endswith("/embeddings"):
            await self._embeddings(request, send)
            return
        if self.fail_status is not None:
            error = {"error": {"message": "fake overload", "type": "ServiceUnavailableError", "code": self.fail_status}}
            await _respond(send, self.fail_status, orjson.dumps(error))
            return
        self.stats.active += 1
        try:
            if path.endswith("/responses"):
                await self._responses(request, send)
            elif path.endswith("/messages"):
                await self._messages(request, send)
            elif path.endswith("/messages/count_tokens"):
                await _respond(send, 200, orjson.dumps({"input_tokens": fake_messages.prompt_tokens(request)}))
            else:
                await self._generate(request, receive, send)
        finally:
            self.stats.active -= 1

    async def _get(self, path: str, send: Any) -> None:
        if path == "/health":
            await _respond(send, 200, b"")
        elif path == "/v1/models":
            cards = [{"id": name, "object": "model", "owned_by": "fake", "max_model_len": 4096,
                      "root": f"/srv/models/{name}-weights", "parent": None} for name in MODEL_NAMES]  # as vLLM
            await _respond(send, 200, orjson.dumps({"object": "list", "data": cards}))
        elif path == "/metrics" and self.serves_metrics:
            await _respond(send, 200, self._engine_metrics())
        elif path == "/_stats":
            await _respond(send, 200, orjson.dumps(self.stats.summary()))
        else:
            await _respond(send, 404, b'{"detail":"Not Found"}')

    def _engine_metrics(self) -> bytes:
        labels = '{engine="0",model_name="fake-model"}'
        lines = ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{labels} {self.stats.active}.0",
                 "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{labels} {self.waiting}.0",
                 "# TYPE vllm:kv_cache_usage_perc gauge",
                 f"vllm:kv_cache_usage_perc{labels} {min(1.0, (self.stats.active + self.waiting) / 16)}",
                 "# TYPE vllm:prefix_cache_queries counter", f"vllm:prefix_cache_queries_total{labels} "
                 f"{100.0 * self.stats.completed}", "# TYPE vllm:prefix_cache_hits counter",
                 f"vllm:prefix_cache_hits_total{labels} {75.0 * self.stats.completed}"]
        return "\n".join(lines).encode() + b"\n"

    async def _embeddings(self, request: dict[str, Any], send: Any) -> None:
        inputs = request["input"] if isinstance(request["input"], list) else [request["input"]]
        data = [{"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]} for i in range(len(inputs))]
        payload = {"object": "list", "data": data, "model": request["model"],
                   "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}}
        await _respond(send, 200, orjson.dumps(payload))

    async def _responses(self, request: dict[str, Any], send: Any) -> None:
        """The Responses API: a whole response, or its events; 404 for an unknown model, as vLLM."""
        refused = fake_responses.refusal(request)
        if request.get("model") not in MODEL_NAMES:
            refused = 404, b'{"error":{"message":"The model does not exist.","type":"NotFoundError","code":404}}'
        if refused is not None:
            await _respond(send, *refused)
            return
        tokens = int(request.get("max_output_tokens") or 16)
        self.stats.completed += 1
        if not request.get("stream"):
            await _respond(send, 200, orjson.dumps(fake_responses.response_object(request, tokens)))
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        for event in fake_responses.stream_events(request, tokens):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _messages(self, request: dict[str, Any], send: Any) -> None:
        """The Messages API: a whole message, or its events."""
        tokens = int(request.get("max_tokens") or 16)
        self.stats.completed += 1
        if not request.get("stream"):
            await _respond(send, 200, orjson.dumps(fake_messages.message(request, tokens)))
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        for event in fake_messages.stream_events(request, tokens):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _generate(self, request: dict[str, Any], receive: Any, send: Any) -> None:
        model = request.get("model")
        tokens, finish = _answer_length(request)
        delay = float(request.get("fake_delay_ms", 0)) / 1000
        if model not in MODEL_NAMES:
            error = {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                               "param": "model", "code": 404}}
            await _respond(send, 404, orjson.dumps(error))
            return
        if model == "fake-hang":
            await _wait_for_disconnect(receive)
            self.stats.disconnects += 1
            return
        if model == "fake-400":
            error = {"error": {"message": "fake bad request", "type": "BadRequestError", "param": None, "code": 400}}
            await _respond(send, 400, orjson.dumps(error))
            return
        if model == "fake-500":
            await _respond(send, 500, b'{"error":{"message":"fake crash","type":"InternalServerError","code":500}}')
            return
        if not request.get("stream"):
            if delay:
                await asyncio.sleep(delay * tokens)
            self.stats.completed += 1  # before the answer leaves: a client that has it may count on it
            await _respond(send, 200, _completion(tokens, finish))
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        if model == "fake-slow-stream":
            await asyncio.sleep(float(request.get("fake_first_ms", 1000)) / 1000)
        gone = asyncio.Event()  # uvicorn's send() is silent after a disconnect; receive() tells
        watcher = asyncio.get_running_loop().create_task(_wait_for_disconnect(receive, gone))
        try:
            finished = await self._stream_tokens(request, model, tokens, finish, delay, send, gone)
        finally:
            watcher.cancel()
        if not finished:  # the proxy dropped the connection: what vLLM sees as an abort
            self.stats.disconnects += 1

    async def _stream_tokens(
        self, request: dict[str, Any], model: str, tokens: int, finish: str, delay: float, send: Any,
        gone: asyncio.Event,
    ) -> bool:
        await send({"type": "http.response.body", "body": _ROLE_CHUNK, "more_body": True})
        size = request.get("fake_chunk_bytes")
        chunk = _chunk(0, {"content": "x" * int(size)}) if size else _TOKEN_CHUNK
        for index in range(tokens):
            if delay:
                await asyncio.sleep(delay)
            if gone.is_set():
                return False
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.stats.chunks_sent += 1
            if index == 2 and model == "fake-die":
                raise RuntimeError("fake upstream dies mid-stream")
            if index == 2 and model == "fake-nodone":
                self.stats.completed += 1
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return True
        tail = _chunk(0, {}, finish)
        if (request.get("stream_options") or {}).get("include_usage"):
            tail += _usage_chunk(12, tokens)
        self.stats.completed += 1  # before [DONE] leaves: a client that has it may count on it
        await send({"type": "http.response.body", "body": tail + _DONE, "more_body": False})
        return True


def _answer_length(request: dict[str, Any]) -> tuple[int, str]:
    """How many tokens the fake writes, and why it stops, as an engine would: ``fake_tokens`` is the
    answer's natural length ("stop"; a continued answer, ``continue_final_message``, has the tokens of
    its assistant text already), cut at the request's max_tokens ("length"). Without ``fake_tokens`` it
    writes max_tokens (or 16) and says "length"."""
    cap = request.get("max_completion_tokens") or request.get("max_tokens")
    if "fake_tokens" not in request:
        return int(cap or 16), "length"
    tokens = int(request["fake_tokens"])
    messages = request.get("messages") or []
    if request.get("continue_final_message") and messages:
        tokens = max(0, tokens - str(messages[-1].get("content", "")).count(" tok"))
    if cap is not None and tokens >= int(cap):
        return int(cap), "length"
    return tokens, "stop"


async def _respond(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _wait_for_disconnect(receive: Any, gone: asyncio.Event | None = None) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if (await receive())["type"] == "http.disconnect":
            if gone is not None:
                gone.set()
            return


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="fake OpenAI upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    uvicorn.run(FakeUpstream(), host=args.host, port=args.port, log_level="warning",
                loop="uvloop", http="httptools", access_log=False)


if __name__ == "__main__":
    main()
