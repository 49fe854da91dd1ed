"""Configuration of the process itself: where it listens, the embedded engine, and what it reports
(metrics labels, the access log). Part of the one frozen ``Config``, kept apart
because none of it touches how a request is rewritten or routed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from policies.request.input_limits import InputLimits
from proxy.config.frozen import Frozen as _Frozen

DEFAULT_CAP = 10_000  # connections per process when the open-file limit allows more
RESERVED_FILES = 256  # descriptors kept for upstream connections, the store, logs


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What ``ConnectionGuard`` enforces: its deadlines (seconds) and its cap."""

    header_timeout: float
    body_timeout: float
    keepalive_timeout: float
    max_connections: int


def default_max_connections(file_limit: int) -> int:
    """Half of what the open-file limit leaves after a reserve: each client connection being answered
    may hold an upstream connection too. At most ``DEFAULT_CAP``, which fits a 1 GiB container."""
    return max(16, min(DEFAULT_CAP, (file_limit - RESERVED_FILES) // 2))


class ServerConfig(_Frozen):
    host: str = "127.0.0.1"
    """listen address"""
    port: int = Field(8080, ge=0, le=65535)
    """listen port"""
    workers: int = Field(1, ge=1)
    """uvicorn worker processes. With more than one, /metrics adds up every worker's metrics from files in
    `PROMETHEUS_MULTIPROC_DIR` (emptied at start), else in a temporary folder; rate limits and caches are per worker
    unless `redis` is set"""
    header_timeout_s: float = Field(10.0, gt=0)
    """a client must send a request's headers within this many seconds of connecting, or of the request's first
    byte on a kept-alive connection; past it the connection is closed, with a 408 if a request had begun. Answers,
    however long, are never cut"""
    body_timeout_s: float = Field(30.0, gt=0)
    """a client must send a request's whole body within this many seconds after its headers, or get a 408 and a
    closed connection (a body of `max_body_bytes` then needs about 140 kB/s)"""
    keepalive_timeout_s: float = Field(5.0, gt=0)
    """a kept-alive connection that begins no next request within this many seconds of its last answer is closed
    (bytes that begin no request do not extend it). Behind a load balancer that reuses connections, set it above
    the balancer's idle timeout"""
    max_connections: int | None = Field(None, ge=1, json_schema_extra={"shown_default": "auto"})
    """open client connections per worker process; auto = min(10000, (open-file limit - 256) / 2), the limit
    first raised to its hard maximum. Past it a new connection closes the one that has waited longest for its
    request (never one being answered); when all are being answered it gets 503 `too_many_connections`, unless
    it asks for `/health`, `/ready` or `/metrics`"""
    drain_timeout_s: float = Field(30.0, gt=0)
    """after SIGTERM: how long answers in flight may take to finish (new connections are refused at
    once); past it each gets a `shutting_down` error (a 503, or a last SSE event) and the process exits"""
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """larger request bodies get 413"""
    max_json_depth: int = Field(64, ge=4)
    """request bodies whose JSON nests deeper get 400 `json_too_deep`"""
    max_messages: int = Field(2048, ge=1)
    """chat requests with more messages, and Responses requests with more input items, get 400 `too_many_messages`"""
    max_content_chars: int = Field(1_000_000, ge=1)
    """a message's text (its string, or its text parts together), a prompt or an embeddings input longer than this
    many characters gets 400 `content_too_long`; so does a Responses request's `instructions`, or an input item's
    text, a tool call's arguments or a tool's output"""
    max_inputs: int = Field(2048, ge=1)
    """completions prompts or embeddings inputs per request; more get 400 `too_many_inputs`"""
    http_client: Literal["aiohttp", "httpx"] = "aiohttp"
    """upstream HTTP client: `aiohttp` or `httpx`"""
    ready_timeout: float = Field(2.0, gt=0)
    """seconds for each replica probe of `/ready` and model discovery"""

    def input_limits(self) -> InputLimits:
        return InputLimits(self.max_json_depth, self.max_messages, self.max_content_chars, self.max_inputs)

    def connection_limits(self, file_limit: int) -> ConnectionLimits:
        """The deadlines and cap for client connections; ``file_limit`` sizes the automatic cap."""
        cap = self.max_connections or default_max_connections(file_limit)
        return ConnectionLimits(self.header_timeout_s, self.body_timeout_s, self.keepalive_timeout_s, cap)


class EngineConfig(_Frozen):
    """The embedded default: a local vLLM CPU engine, started only when no pool is configured."""

    enabled: bool | None = Field(None, json_schema_extra={"shown_default": "auto"})
    """`true`/`false` to force; auto = only when `pools` is empty"""
    served_model_name: str = "prefixgate-tiny"
    """model name clients use"""
    model_dir: str | None = Field(None, json_schema_extra={"shown_default": "built tiny model"})
    """a local model directory to serve instead"""
    port: int | None = Field(None, ge=1, le=65535, json_schema_extra={"shown_default": "free port"})
    """engine port on 127.0.0.1"""
    max_model_len: int = Field(65_536, ge=128)
    """longest prompt plus output, in tokens (`--max-model-len`): a coding agent's prompt is ~45,000 of the tiny
    model's tokens. A request that asks for more output than its prompt leaves is clamped to what fits (the pool's
    `max_model_len`). The tiny model's KV cache takes ~1 KB a token, so a whole context fits `kv_cache_gib` many
    times over"""
    default_max_tokens: int | None = Field(1024, ge=1)
    """output cap given to requests that name none (the embedded pool's `max_tokens_default`; a tenant's
    `default_max_tokens` comes first): on a long context the tiny model's random words otherwise run on for many
    minutes, as a client that names no cap (Codex) would wait for. None: no default, the engine writes until the
    context is full"""
    kv_cache_gib: int = Field(1, ge=1)
    """`VLLM_CPU_KVCACHE_SPACE`"""
    startup_timeout: float = Field(240.0, gt=0)
    """seconds to wait for the engine's `/health`"""
    tool_call_parser: str | None = Field(None, json_schema_extra={"shown_default": "`pythonic` for the tiny model"})
    """`--tool-call-parser`, with `--enable-auto-tool-choice`: vLLM refuses `tool_choice` `auto`, `required` or a named
    function without one. The tiny model gets `pythonic` (calls written as a Python list; no special tokens needed);
    a model of your own (`model_dir`) gets none unless you name its parser here; `none`: none"""
    compact_json: bool | None = Field(None, json_schema_extra={"shown_default": "on for the tiny model"})
    """structured output and forced tool calls written without whitespace between JSON tokens (vLLM's
    `--structured-outputs-config` `disable_any_whitespace`, xgrammar): the tiny model's random weights otherwise pad
    JSON with whitespace until `max_tokens` runs out. Off for a model of your own unless set"""
    answers_end: bool | None = Field(None, json_schema_extra={"shown_default": "on for the tiny model"})
    """the tiny model's sampled answers end, as a real model's do: one in twenty of its token ids ends an answer
    (a generation config the engine is given, vLLM's `--generation-config`), so most answers run some tens of tokens.
    A coding agent reports an answer that runs to its cap as an error. Off: its random words run to the cap
    (`max_tokens`, else `default_max_tokens`). No effect on a model of your own (`model_dir`)"""
    extra_args: list[str] = Field(default_factory=list)
    """more `vllm serve` flags"""

    def vllm_args(self) -> list[str]:
        """The `vllm serve` flags these settings add to the engine's own: the tiny model's defaults only where
        no `model_dir` names another model, whose parser and JSON style are its own."""
        tiny = self.model_dir is None
        parser = self.tool_call_parser if self.tool_call_parser is not None else "pythonic" if tiny else "none"
        args: list[str] = []
        if parser != "none":
            args += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
        if self.compact_json if self.compact_json is not None else tiny:
            args += ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
        return [*args, *self.extra_args]


class MetricsConfig(_Frozen):
    """Which tenants get their own label value on /metrics; the rest count as ``other``."""

    tenants: list[str] | None = Field(None, json_schema_extra={"shown_default": "the tenants API keys name"})
    """tenants that get their own `tenant` label value; every other tenant counts as `other` (and requests refused
    before authentication as `none`), so a thousand keys make no more series than the list"""
    max_tenants: int = Field(100, ge=0)
    """at most this many of them (the first, by name when taken from the keys)"""


class AccessLogConfig(_Frozen):
    """One JSON line per request (tenant, pool, replica, status, tokens, stage timings, cache results)."""

    enabled: bool = False
    """write the access log. Off by default, as in most proxies: a sidecar's app and engine log already. A line
    costs about 5 microseconds of CPU (4.2 per line serialized and written, writer thread included)"""
    path: str | None = Field(None, json_schema_extra={"shown_default": "standard output"})
    """a file to append to"""
    prompts: bool = False
    """debugging only: add each request's body as sent upstream (prompt content) to its line"""
