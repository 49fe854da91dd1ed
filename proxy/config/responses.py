"""Configuration of the Responses API's conversation state (``responses``): how long a stored
response can be continued, fetched or deleted, and how much of them one process keeps without Redis.

Part of the one frozen ``Config``.
"""

from __future__ import annotations

from pydantic import Field

from proxy.config.frozen import Frozen as _Frozen

DAY_S = 86_400.0


class ResponsesConfig(_Frozen):
    """Stored responses (`previous_response_id`, `GET` and `DELETE /v1/responses/{id}`): in Redis when `redis`
    is set, shared by every gateway process and kept across restarts; else in each process's memory."""

    ttl_s: float = Field(30 * DAY_S, gt=0, json_schema_extra={"shown_default": "2592000 (30 days)"})
    """how long a stored response can be continued, fetched or deleted; then it is gone (404)"""
    redis_timeout_ms: float = Field(1000.0, gt=0)
    """with Redis: each call for a stored response; longer than the caches' `redis.timeout_ms`, since a response
    that could not be stored cannot be continued (a cache miss only costs a recomputation)"""
    max_memory_mb: float = Field(256.0, gt=0)
    """without Redis: the most memory each process's stored responses take (their JSON and its bookkeeping); past it
    the least recently used go first"""
