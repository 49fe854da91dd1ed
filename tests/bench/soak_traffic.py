"""The users' side of the full soak: requests at a fixed rate, and what each one got and when.

A cycle of 20 requests mixes JSON and SSE answers, retrieval, an answer-cached tenant, a rate-limited
tenant (429s shared through Redis by both workers) and clients that leave after the first chunk. Each
request names its tenant's long system prompt, so the engines hold prefixes and `balance: kv_events`
has blocks to route by; `ignore_eos` with `max_tokens` gives the tiny model fixed answer lengths.

An ``Outcome`` keeps its start and end (seconds into the run) and, when it failed, why in the gateway's
own words (the error code of its JSON error or of the SSE error event, or the client's exception), so
the report can tell the failures the killed engine caused from any other.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from tests.bench.soak_stack import KEYS, MODEL

CYCLE = ["json", "stream", "rag_stream", "json", "cached", "long_stream", "rag_json", "gone", "limited", "stream",
         "json", "rag_stream", "stream", "cached", "json", "gone", "rag_json", "long_stream", "limited", "stream"]
EXPECTED = {"json": {200}, "stream": {200}, "long_stream": {200}, "rag_json": {200}, "rag_stream": {200},
            "cached": {200}, "limited": {200, 429}, "gone": {200}}
# answers long enough that an engine always has a few streams under way when it is killed
TOKENS = {"json": 16, "stream": 24, "long_stream": 256, "rag_json": 16, "rag_stream": 24, "cached": 8, "limited": 8,
          "gone": 200}
TOPICS = ("returns and refunds", "shipping times", "blender warranties", "invoices and payment")


def system_prompt(topic: str) -> str:
    """An app's long, fixed instructions: about 800 of the tiny model's tokens (six of the engine's 128-token
    blocks), leaving room in its 4,096 for retrieved passages."""
    rules = [f"Rule {n}: when asked about {topic}, answer in plain words and cite item {n * 7} of the handbook."
             for n in range(16)]
    return f"You are the support assistant for {topic}.\n" + "\n".join(rules)


SYSTEMS = [system_prompt(topic) for topic in TOPICS]


def request_for(kind: str, index: int) -> tuple[str, dict[str, Any]]:
    """(key, body) of the index-th request of a kind; cached questions repeat so the answer cache hits."""
    question = f"Question {index}: how long does delivery take, and can I return an item?"
    if kind.startswith("rag"):
        question = f"Question {index}: what does code zq{index % 50} mean for my order?"
    if kind == "cached":
        question = f"FAQ {index % 20}: what is your returns policy?"
    body: dict[str, Any] = {"model": MODEL, "max_tokens": TOKENS[kind], "ignore_eos": True,
                            "messages": [{"role": "system", "content": SYSTEMS[index % len(SYSTEMS)]},
                                         {"role": "user", "content": question}]}
    if kind in ("stream", "long_stream", "rag_stream", "gone"):
        body.update(stream=True, stream_options={"include_usage": True})
    if kind == "cached":
        body["temperature"] = 0
    tenant = {"rag_json": "rag", "rag_stream": "rag", "cached": "cached", "limited": "limited"}.get(kind, "app")
    return KEYS[tenant], body


@dataclass
class Outcome:
    kind: str
    started: float  # seconds into the run
    ended: float
    status: int | None  # None: no answer at all
    code: str = ""  # why it failed: the gateway's error code, "stream_error:CODE", or the client's exception

    @property
    def ok(self) -> bool:
        return not self.code and self.status in EXPECTED[self.kind]

    @property
    def cause(self) -> str:
        return f"{self.status if self.status is not None else 'no answer'} {self.code}".strip()


def error_code(data: bytes) -> str:
    """The error code of an OpenAI error body (or of an SSE error event's data)."""
    try:
        error = orjson.loads(data).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return "unreadable_error"
    return str(error.get("code") or error.get("type") or "error")


def stream_problem(data: bytes) -> str:
    """Why a 200 stream is not whole: an error event, or no `[DONE]`; "" when it is whole."""
    for line in data.split(b"\n"):
        if line.startswith(b'data: {"error"'):
            return "stream_error:" + error_code(line[6:])
    return "" if data.endswith(b"data: [DONE]\n\n") else "stream_without_done"


async def one_request(client: httpx.AsyncClient, url: str, kind: str, index: int, started: float) -> Outcome:
    key, body = request_for(kind, index)
    outcome = Outcome(kind, round(time.monotonic() - started, 3), 0.0, None)
    try:
        async with client.stream("POST", url, json=body, headers={"Authorization": f"Bearer {key}"}) as answer:
            outcome.status = answer.status_code
            if kind == "gone" and answer.status_code == 200:
                async for _ in answer.aiter_raw():
                    break  # the first chunk, then leave: the gateway must abort the engine's request
            else:
                data = await answer.aread()
                if answer.status_code != 200:
                    outcome.code = "" if answer.status_code in EXPECTED[kind] else error_code(data)
                elif body.get("stream"):
                    outcome.code = stream_problem(data)
                elif b'"choices"' not in data:
                    outcome.code = "json_without_choices"
    except httpx.HTTPError as error:
        outcome.code = type(error).__name__
    outcome.ended = round(time.monotonic() - started, 3)
    return outcome


async def drive(origin: str, started: float, seconds: float, rate: float, outcomes: list[Outcome]) -> None:
    """Send ``rate`` requests a second until ``seconds`` into the run, each into ``outcomes`` when it ends;
    returns once every answer is in."""
    url = origin + "/v1/chat/completions"
    # idle connections dropped before the gateway's keep-alive timeout (5 s) can close them under a request
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=2.0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        tasks: set[asyncio.Task[None]] = set()

        async def run(index: int) -> None:
            outcomes.append(await one_request(client, url, CYCLE[index % len(CYCLE)], index, started))

        index, first = 0, time.monotonic() - started
        while (now := time.monotonic() - started) < seconds:
            due = first + index / rate
            if due > now:
                await asyncio.sleep(due - now)
            task = asyncio.create_task(run(index))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            index += 1
        await asyncio.gather(*tasks)
