"""vLLM's KV-cache event batches as they arrive over ZeroMQ, decoded with msgspec (vLLM's own codec).

A batch is a msgpack array ``[ts, events, data_parallel_rank]``; each event a map tagged by ``type``
(``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``) whose fields at their defaults are left out.
Only the fields routing reads are declared; others (``medium``, ``group_idx``, ``lora_name``...) are
skipped by the decoder. Block hashes are unsigned 64-bit ints by default
(``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``) or raw digest bytes; both are only names here.

Each message on the wire is three frames: the topic, the batch's sequence number (8 bytes, big-endian,
from 0 for each engine process) and the payload. ``REPLAY_END`` is the sequence number of the empty
message that ends a replay.
"""

from __future__ import annotations

from typing import Any

import msgspec

REPLAY_END = b"\xff" * 8


class BlockStored(msgspec.Struct, tag=True, kw_only=True):
    block_hashes: list[Any]
    parent_block_hash: Any = None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    extra_keys: list[Any] | None = None


class BlockRemoved(msgspec.Struct, tag=True, kw_only=True):
    block_hashes: list[Any]


class AllBlocksCleared(msgspec.Struct, tag=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


DECODER = msgspec.msgpack.Decoder(KVEventBatch)


def decode(payload: bytes) -> KVEventBatch:
    """One batch; raises ``msgspec.DecodeError`` (or ``ValidationError``) for one that is not."""
    return DECODER.decode(payload)
