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
from collections.abc import AsyncIterator
from typing import Any

import orjson

from policies.refusals import ProviderFailed, Refused
from proxy.clock import Clock
from proxy.config.pools import LitellmPoolConfig
from proxy.transports.base import TransportFactory
from proxy.upstream.pool import Pool, Relayed, RelayedStream, Usage

ENGINE_ONLY_FIELDS = ("cache_salt",)  # vLLM extensions a hosted API would refuse


class LitellmPool(Pool):
    """Pool kind ``litellm``: no replicas, health or KV events of its own; ``pick`` gives none, and each
    request is one litellm call (``relay``), which reports the usage of every answer."""

    config_model = LitellmPoolConfig
    counts_usage_itself = True
    serves_engine_apis = False  # its calls are litellm's chat completions: no Responses, no Messages
    continues_answers = False  # a provider neither reports the cut nor writes on from a partial answer

    def __init__(self, config: LitellmPoolConfig, transports: TransportFactory, clock: Clock) -> None:
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

    async def relay(self, body: bytes, *, stream: bool) -> Relayed:
        """Answer the request body through litellm (``relay_via_litellm``)."""
        config = self.provider
        return await relay_via_litellm(pool=self.name, body=orjson.loads(body), stream=stream,
                                       model=config.litellm_model, api_base=config.api_base, api_key=config.api_key,
                                       timeout=config.timeouts.total)


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


def _usage(usage: Any) -> Usage:
    if usage is None:
        return None, None
    return getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)


async def relay_via_litellm(*, pool: str, body: dict[str, Any], stream: bool, model: str | None,
                            api_base: str | None, api_key: str | None, timeout: float) -> Relayed:
    """Answer ``body`` through litellm, as data the call sends; raises ``Refused`` with the provider's failure."""
    litellm = load_litellm()
    try:
        answer = await litellm.acompletion(**_arguments(body, model, api_base, api_key, timeout))
    except Exception as error:  # litellm maps each provider's errors to its own exception types
        raise Refused(_provider_failed(error, pool)) from error
    if not stream:
        return Relayed(orjson.dumps(answer.model_dump(exclude_none=True)), _usage(getattr(answer, "usage", None)))
    return Relayed(stream=LitellmStream(answer, pool))


class LitellmStream(RelayedStream):
    """litellm's chunks as OpenAI's SSE events; a failure while they are read raises the provider's refusal."""

    __slots__ = ("chunks", "pool", "usage")

    def __init__(self, chunks: AsyncIterator[Any], pool: str) -> None:
        self.chunks = chunks
        self.pool = pool
        self.usage: Usage = (None, None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        count = 0
        try:
            async for chunk in self.chunks:
                count += 1
                if getattr(chunk, "usage", None) is not None:
                    self.usage = _usage(chunk.usage)
                yield b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"
        except Exception as error:
            raise Refused(_provider_failed(error, self.pool)) from error
        if self.usage == (None, None):
            self.usage = (None, max(count - 1, 0))
