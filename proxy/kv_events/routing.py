"""A pool's routing by what its engines hold (``balance: kv_events``): one ``HeldBlocks`` index fed by one
``EventFeed`` per replica, and the prompt's tokens (``PromptTokens``) to look a request up in it.

Each replica's event socket comes from the config or from the replica itself (vLLM's
``GET /kv_event_sources`` names it; a ``*`` host, the engine binding every interface, becomes the
replica's host). A replica that does not answer yet is asked again every few seconds; until its events
flow it holds nothing in the index, so its requests go by the ring as under ``balance: prefix``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson
import zmq.asyncio

from policies.routing.kv_blocks import HeldBlocks
from proxy.config.upstream import KvEvents
from proxy.kv_events.prefix_walk import PrefixWalk
from proxy.kv_events.prompt_tokens import PromptTokens
from proxy.kv_events.subscriber import EventFeed
from proxy.transports.base import Transport, UpstreamError

log = logging.getLogger("prefixgate")
DISCOVERY_RETRY_S = 5.0


class Askable(Protocol):
    """What discovery needs of a replica: its base URL and a transport that can GET."""

    base_url: str
    transport: Transport


def _origin(base_url: str) -> str:
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"


def resolve_endpoint(endpoint: str, base_url: str) -> str:
    """An engine's bind address as one to connect to: ``tcp://*:5557`` at the replica's host."""
    host = urlsplit(base_url).hostname or "127.0.0.1"
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:", "tcp://[::]:"):
        if endpoint.startswith(wildcard):
            return f"tcp://{host}:{endpoint[len(wildcard):]}"
    return endpoint


class KvRouting:
    """The index over a pool's replicas and what keeps it current."""

    def __init__(self, replicas: Sequence[Askable], settings: KvEvents) -> None:
        assert settings.tokenizer is not None  # the config requires it with balance kv_events
        self.replicas = list(replicas)
        self.settings = settings
        self.index = HeldBlocks(len(self.replicas), settings.max_blocks)
        self.tokens = PromptTokens(settings.tokenizer, settings.max_chars)
        self.walk = PrefixWalk(self.tokens)
        self.feeds = [EventFeed(number, endpoint, self.index, topic=settings.topic or "")
                      for number, endpoint in enumerate(settings.endpoints or [""] * len(self.replicas))]

    @property
    def block_size(self) -> int | None:
        return next((feed.state.block_size for feed in self.feeds if feed.state.block_size), None)

    def held(self, body: dict[str, Any], salt: str | None) -> list[int] | None:
        """How many of the request's leading blocks each replica holds; None before any event told the
        block size, or for a body whose tokens cannot be rendered."""
        block = self.block_size
        if block is None:
            return None
        try:
            rendered = self.tokens.rendered(body)
        except Exception as error:  # a template that refuses this conversation: the engine will say why
            log.debug("KV events: cannot render the prompt (%s); routing it by the ring", error)
            return None
        if rendered is None:
            return None
        return self.walk.held(self.index, rendered[0], rendered[1], block, salt)

    def footprint(self) -> list[int | None]:
        """The blocks each replica's engine holds, as its events said (None: no event came from it yet, so
        its count says nothing): where a prompt held nowhere goes (``placed_home``)."""
        return [None if feed.state.last_seq is None else self.index.size(feed.replica) for feed in self.feeds]

    async def run(self, timeout: float) -> None:
        """Every replica's feed, for as long as the pool lives."""
        context = zmq.asyncio.Context()
        try:
            await asyncio.gather(*(self._feed(feed, replica, context, timeout)
                                   for feed, replica in zip(self.feeds, self.replicas, strict=True)))
        finally:
            context.destroy(linger=0)

    async def _feed(self, feed: EventFeed, replica: Askable, context: zmq.asyncio.Context, timeout: float) -> None:
        while not feed.endpoint:
            source = await self._ask(replica, timeout)
            if source is not None:
                feed.endpoint = resolve_endpoint(str(source["endpoint"]), replica.base_url)
                replay = source.get("replay_endpoint")
                feed.replay = resolve_endpoint(str(replay), replica.base_url) if replay else None
                if self.settings.topic is None:
                    feed.topic = str(source.get("topic") or "")
                break
            await asyncio.sleep(DISCOVERY_RETRY_S)
        log.info("KV events of %s from %s", replica.base_url, feed.endpoint)
        while True:
            try:
                await feed.run(context)
            except zmq.ZMQError as error:  # a bad endpoint, a closed context: say so, forget, try again
                log.warning("KV events of %s from %s failed: %s", replica.base_url, feed.endpoint, error)
                self.index.cleared(feed.replica)
                await asyncio.sleep(DISCOVERY_RETRY_S)

    async def _ask(self, replica: Askable, timeout: float) -> dict[str, Any] | None:
        """The replica's first event source (``GET /kv_event_sources``), or None."""
        try:
            status, body = await replica.transport.get(_origin(replica.base_url) + "/kv_event_sources", timeout)
            sources = orjson.loads(body) if status == 200 else None
        except (UpstreamError, orjson.JSONDecodeError):
            return None
        if not isinstance(sources, dict) or not sources:
            return None
        source = next(iter(sources.values()))
        return source if isinstance(source, dict) and source.get("endpoint") else None
