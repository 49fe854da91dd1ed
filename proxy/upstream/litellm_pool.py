"""Pools of kind ``litellm``: requests go through litellm's async completion API to any provider it
supports (a hosted API to spill over to when the local vLLM pools shed load, see ``overflow_to``).

Only here does prefixgate parse and re-serialize an answer: litellm returns its own objects, turned
back into OpenAI's JSON and SSE framing. vLLM pools never come this way. litellm is imported when
the gateway starts (it takes about a second), told to use the copy of its model price map it ships
with instead of fetching one.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson
from starlette.types import Send
from uvicorn.protocols.utils import ClientDisconnected

from policies.admission.refusals import ProviderFailed
from proxy.clock import SYSTEM_CLOCK, Clock
from proxy.config.pools import LitellmPoolConfig
from proxy.transports.base import TransportFactory
from proxy.upstream.pool import Pool, Usage
from proxy.wire.errors import openai_error, refusal_event

ENGINE_ONLY_FIELDS = ("cache_salt",)  # vLLM extensions a hosted API would refuse
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


class LitellmPool(Pool):
    """Pool kind ``litellm``: no replicas, health or KV events of its own; ``pick`` gives none, and each
    request is one litellm call (``relay``), which reports the usage of every answer."""

    config_model = LitellmPoolConfig
    counts_usage_itself = True
    serves_responses = False  # its calls are litellm's chat completions
    continues_answers = False  # a provider neither reports the cut nor writes on from a partial answer

    def __init__(self, config: LitellmPoolConfig, transports: TransportFactory, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(config, transports, clock)  # litellm makes its own connections
        self.provider = config

    @property
    def catch_all(self) -> bool:
        """Only the models it lists: a hosted provider has no list to discover, nor every model."""
        return False

    async def start(self, timeout: float) -> list[asyncio.Task[None]]:
        """Import litellm (about a second) off the event loop, before the first request waits for it."""
        await asyncio.to_thread(load_litellm)
        return []

    async def relay(self, send: Send, body: bytes, *, stream: bool, headers: list[tuple[bytes, bytes]],
                    head_sent: bool) -> tuple[int, Usage]:
        """Answer the request body through litellm: the status and (prompt, completion) tokens."""
        config = self.provider
        return await relay_via_litellm(send, pool=self.name, body=orjson.loads(body), stream=stream,
                                       model=config.litellm_model, api_base=config.api_base, api_key=config.api_key,
                                       timeout=config.timeouts.total, headers=headers, head_sent=head_sent)


def load_litellm() -> Any:
    """Import litellm (``LitellmPool.start`` does it off the event loop when the gateway starts)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as error:
        raise RuntimeError("pools of kind litellm need litellm: pip install 'prefixgate[providers]'") from error
    return litellm


def _arguments(body: dict[str, Any], model: str | None, api_base: str | None, api_key: str | None,
               timeout: float) -> dict[str, Any]:
    arguments = {k: v for k, v in body.items() if k not in ENGINE_ONLY_FIELDS}
    if model is not None:
        arguments["model"] = model
    if api_base is not None:
        arguments["api_base"] = api_base
    if api_key is not None:
        arguments["api_key"] = api_key
    arguments["timeout"] = timeout
    return arguments


def _provider_failed(error: Exception, pool: str) -> ProviderFailed:
    """The provider's 4xx as it came; anything else a 502. Only the message's first line, shortened:
    litellm's messages for failures of its own can carry a whole traceback."""
    status = getattr(error, "status_code", None)
    if not isinstance(status, int) or not 400 <= status < 500:
        status = 502
    message = str(getattr(error, "message", None) or error or type(error).__name__).strip()
    first = message.splitlines()[0][:300] if message else type(error).__name__
    return ProviderFailed(pool, status, first)


def _usage(usage: Any) -> tuple[int | None, int | None]:
    if usage is None:
        return None, None
    return getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)


async def relay_via_litellm(send: Send, *, pool: str, body: dict[str, Any], stream: bool, model: str | None,
                            api_base: str | None, api_key: str | None, timeout: float,
                            headers: list[tuple[bytes, bytes]],
                            head_sent: bool = False) -> tuple[int, tuple[int | None, int | None]]:
    """Answer ``body`` through litellm; returns the status and the usage reported. ``head_sent``:
    SSE keep-alives already sent the 200, so only events may follow."""
    litellm = load_litellm()
    try:
        answer = await litellm.acompletion(**_arguments(body, model, api_base, api_key, timeout))
    except Exception as error:  # litellm maps each provider's errors to its own exception types
        failed = _provider_failed(error, pool)
        if head_sent:
            await send({"type": "http.response.body", "more_body": False, "body": refusal_event(failed)})
        else:
            await openai_error(failed).send(send)
        return failed.status, (None, None)
    if not stream:
        payload = orjson.dumps(answer.model_dump(exclude_none=True))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]})
        await send({"type": "http.response.body", "body": payload, "more_body": False})
        return 200, _usage(getattr(answer, "usage", None))
    if not head_sent:
        await send({"type": "http.response.start", "status": 200, "headers": [*_SSE_HEADERS, *headers]})
    usage: tuple[int | None, int | None] = (None, None)
    chunks = 0
    try:
        async for chunk in answer:
            chunks += 1
            if getattr(chunk, "usage", None) is not None:
                usage = _usage(chunk.usage)
            event = b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": True})
    except ClientDisconnected:  # the client left: the call's own handling, not a provider error event
        raise
    except Exception as error:
        await send({"type": "http.response.body", "more_body": False,
                    "body": refusal_event(_provider_failed(error, pool))})
        return 200, usage
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
    if usage == (None, None):
        usage = (None, max(chunks - 1, 0))
    return 200, usage
