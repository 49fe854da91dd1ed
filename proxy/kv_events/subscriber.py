"""One engine's KV-cache events, received over ZeroMQ and applied to its pool's ``HeldBlocks``.

vLLM publishes each scheduler step's events on a PUB socket as numbered batches. ``EventFeed`` keeps a
SUB socket on it and checks the numbering: a batch numbered below the last one means the engine
restarted (its cache is empty: the replica is cleared), one numbered above the next expected means
batches were lost (the high-water mark, a reconnect, a gateway that started after the engine). Lost
batches are asked again from the engine's replay socket when it has one (a DEALER, since the answer
is one message per batch and then an end marker); when it has none, or the engine no longer keeps
them, the replica is cleared and the index fills again from the events that follow, as the engine
stores new blocks. A feed that joins a running engine asks the replay socket for everything it still
keeps, so a restarted gateway knows at once what its engines held. A cleared replica is routed as a
cold one until its events fill it again: never worse than the ring.

The feed runs as a task of the app's lifespan; decoding and applying a batch take microseconds per
block and never wait, so they run on the event loop between requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import zmq
import zmq.asyncio

from policies.routing.kv_blocks import HeldBlocks
from proxy.kv_events.messages import REPLAY_END, AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch, decode

log = logging.getLogger("prefixgate")
REPLAY_TIMEOUT = 2.0  # seconds to wait for each message of a replay


@dataclass
class FeedState:
    """What a feed has seen, for metrics: read by the load collector, written only by the feed."""

    last_seq: int | None = None
    batches: int = 0
    missed: int = 0  # batches lost for good (the replica was cleared for them)
    replayed: int = 0
    restarts: int = 0
    undecodable: int = 0
    lag_s: float = 0.0  # now minus the last batch's timestamp, when it arrived
    block_size: int | None = None


@dataclass
class EventFeed:
    """The events of replica ``replica`` (its bit in ``index``), from ``endpoint`` (``replay``: the
    engine's replay socket, if any)."""

    replica: int
    endpoint: str
    index: HeldBlocks
    topic: str = ""
    replay: str | None = None
    wall_clock: Callable[[], float] = time.time
    state: FeedState = field(default_factory=FeedState)

    async def run(self, context: zmq.asyncio.Context) -> None:
        socket = context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        socket.connect(self.endpoint)
        try:
            while True:
                frames = await socket.recv_multipart()
                if len(frames) == 3:
                    await self.receive(int.from_bytes(frames[1], "big"), frames[2], context)
        finally:
            socket.close()

    async def receive(self, seq: int, payload: bytes, context: zmq.asyncio.Context | None = None) -> None:
        """A batch from the live stream: applied after any batches missed before it."""
        state = self.state
        last = state.last_seq
        if last is None and seq > 0:  # joined a running engine: what it stored before, as far as it keeps it
            for number, earlier in await self.replayed(0, seq, context):
                self.apply(number, earlier)
        elif last is not None and seq <= last:
            state.restarts += 1  # numbering starts again: a new engine process with an empty cache
            self.index.cleared(self.replica)
        elif last is not None and seq > last + 1:
            lost = await self.replayed(last + 1, seq, context)
            if [number for number, _ in lost] == list(range(last + 1, seq)):
                for number, earlier in lost:
                    self.apply(number, earlier)
                state.replayed += len(lost)
            else:  # the engine no longer keeps some of them
                state.missed += seq - last - 1
                self.index.cleared(self.replica)
        self.apply(seq, payload)

    async def replayed(self, first: int, upto: int, context: zmq.asyncio.Context | None) -> list[tuple[int, bytes]]:
        """The batches ``first`` .. ``upto - 1`` the engine's replay socket still has, in order."""
        if self.replay is None or context is None:
            return []
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.replay)
        got: list[tuple[int, bytes]] = []
        try:
            await socket.send_multipart([b"", first.to_bytes(8, "big")])
            while True:
                frames = await asyncio.wait_for(socket.recv_multipart(), REPLAY_TIMEOUT)
                if len(frames) != 4 or frames[2] == REPLAY_END:
                    break
                seq = int.from_bytes(frames[2], "big")
                if first <= seq < upto:
                    got.append((seq, frames[3]))
        except (TimeoutError, zmq.ZMQError) as error:
            log.warning("KV events: replay from %s failed (%s)", self.replay, error)
            return []
        finally:
            socket.close()
        return got

    def apply(self, seq: int, payload: bytes) -> None:
        state = self.state
        state.last_seq = seq
        try:
            batch = decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            state.undecodable += 1
            self.index.cleared(self.replica)  # a batch we cannot read may have evicted anything
            return
        state.batches += 1
        state.lag_s = max(0.0, self.wall_clock() - batch.ts)
        self.apply_events(batch)

    def apply_events(self, batch: KVEventBatch) -> None:
        index, replica = self.index, self.replica
        for event in batch.events:
            if isinstance(event, BlockStored):
                if event.lora_id is not None:
                    continue  # an adapter's blocks: requests are not keyed with adapters
                self.state.block_size = event.block_size
                index.stored(replica, event.parent_block_hash, event.block_hashes, event.token_ids,
                             event.block_size, event.extra_keys)
            elif isinstance(event, BlockRemoved):
                index.removed(replica, event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                index.cleared(replica)
