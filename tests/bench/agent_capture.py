"""A recording upstream for coding-agent CLIs: capturing real Claude Code and Codex CLI sessions as input
for the tests/bench replay benchmarks.

Point an agent at it (Claude Code: ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT``; Codex: a model provider
with ``base_url = "http://127.0.0.1:PORT/v1"`` and ``wire_api = "responses"``) and every request it makes
is written as one JSON line to ``--out``: method, path with its query, headers less the auth secrets, and
the body (JSON, or text when it is not JSON). It answers just enough for the CLI's turn to end at once:

  POST /v1/messages[?beta=true]       an Anthropic message ("Done."), as SSE when the body asks to stream
  POST /v1/messages/count_tokens      {"input_tokens": N}, N about a quarter of the body's bytes
  POST /v1/responses                  an OpenAI Responses stream (or JSON when not streaming), one message
  GET  /v1/models                     a model list (both the OpenAI and the Anthropic shape)
  anything else                       404 with a JSON error, recorded too

A driver marks the session and turn it is about to run with ``POST /_capture/mark {"session": s, "turn": t}``
(not recorded itself); each later record carries those two numbers. No tool use is ever asked for, so a
turn is one model call plus whatever the CLI sends on the side (titles, quota probes, token counts).

    python tests/bench/agent_capture.py --port 8765 --out /tmp/capture.jsonl

tests/bench/agent_capture_sessions.sh drives both CLIs through it and scrubs the result into
tests/bench/agent_sessions/ (see the README there).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization", "openai-api-key",
                            "chatgpt-account-id"})
ANSWER = "Done."
MODELS = ("claude-sonnet-4-5", "claude-haiku-4-5", "gpt-5-codex", "gpt-5")
STATE = web.AppKey("state", dict)


def _body(raw: bytes) -> Any:
    """JSON, or text when it is not JSON; aiohttp has already undone a gzip/deflate/br content-encoding."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


@web.middleware
async def record(request: web.Request, handler: Any) -> web.StreamResponse:
    """Write the request as one JSON line before it is answered; the body is parked on the request."""
    state = request.app[STATE]
    raw = await request.read()
    request["body"] = _body(raw)
    if request.path == "/_capture/mark":
        state["session"], state["turn"] = request["body"]["session"], request["body"]["turn"]
        return web.json_response({"ok": True})
    line = {"seq": next(state["seq"]), "time": time.time(), "session": state["session"], "turn": state["turn"],
            "method": request.method, "path": request.path_qs,
            "headers": {k.lower(): v for k, v in request.headers.items() if k.lower() not in SECRET_HEADERS},
            "body": request["body"]}
    with state["out"].open("a") as out:
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
    return await handler(request)


def _tokens(request: web.Request) -> int:
    return max(1, len(json.dumps(request["body"])) // 4)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def _stream(request: web.Request, events: list[tuple[str, dict[str, Any]]]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
    await response.prepare(request)
    for event, data in events:
        await response.write(_sse(event, data))
    await response.write_eof()
    return response


async def messages(request: web.Request) -> web.StreamResponse:
    body = request["body"] if isinstance(request["body"], dict) else {}
    model, tokens = body.get("model", MODELS[0]), _tokens(request)
    usage = {"input_tokens": tokens, "output_tokens": 2, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    message = {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}
    if not body.get("stream"):
        return web.json_response({**message, "content": [{"type": "text", "text": ANSWER}],
                                  "stop_reason": "end_turn", "usage": usage})
    return await _stream(request, [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": ANSWER}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": usage}),
        ("message_stop", {"type": "message_stop"}),
    ])


async def count_tokens(request: web.Request) -> web.Response:
    return web.json_response({"input_tokens": _tokens(request)})


def _response_object(body: dict[str, Any], tokens: int, status: str, output: list[Any]) -> dict[str, Any]:
    return {"id": body["_id"], "object": "response", "created_at": int(time.time()), "status": status,
            "model": body.get("model", MODELS[2]), "output": output, "parallel_tool_calls": True,
            "usage": None if status != "completed" else {
                "input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": tokens + 2}}


async def responses(request: web.Request) -> web.StreamResponse:
    body = dict(request["body"]) if isinstance(request["body"], dict) else {}
    body["_id"], tokens, item_id = f"resp_{uuid.uuid4().hex}", _tokens(request), f"msg_{uuid.uuid4().hex}"
    part = {"type": "output_text", "text": ANSWER, "annotations": []}
    item: dict[str, Any] = {"id": item_id, "type": "message", "status": "completed", "role": "assistant",
                            "content": [part]}
    if not body.get("stream"):
        return web.json_response(_response_object(body, tokens, "completed", [item]))
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _response_object(body, tokens, "in_progress", [])}),
        ("response.in_progress", {"response": _response_object(body, tokens, "in_progress", [])}),
        ("response.output_item.added", {"output_index": 0, "item": {**item, "status": "in_progress",
                                                                    "content": []}}),
        ("response.content_part.added", {**where, "part": {**part, "text": ""}}),
        ("response.output_text.delta", {**where, "delta": ANSWER}),
        ("response.output_text.done", {**where, "text": ANSWER}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": _response_object(body, tokens, "completed", [item])}),
    ]
    return await _stream(request, [(name, {"type": name, "sequence_number": n, **data})
                                   for n, (name, data) in enumerate(events)])


async def models(request: web.Request) -> web.Response:
    data = [{"id": m, "object": "model", "type": "model", "display_name": m, "created": 1700000000,
             "created_at": "2025-01-01T00:00:00Z", "owned_by": "prefixgate"} for m in MODELS]
    return web.json_response({"object": "list", "data": data, "has_more": False, "first_id": MODELS[0],
                              "last_id": MODELS[-1]})


async def not_found(request: web.Request) -> web.Response:
    return web.json_response({"type": "error", "error": {"type": "not_found_error", "code": "not_found",
                              "message": f"{request.method} {request.path} is not served here"}}, status=404)


def build(out: Path) -> web.Application:
    app = web.Application(middlewares=[record], client_max_size=64 * 1024 * 1024)
    app[STATE] = {"out": out, "seq": itertools.count(), "session": None, "turn": None}
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_post("/v1/responses", responses)
    app.router.add_get("/v1/models", models)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended to")
    args = parser.parse_args()
    web.run_app(build(args.out), host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
