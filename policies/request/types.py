"""Plain types of a request shared by policies/ and proxy/ (its endpoint, the fields that carry its prompt and
cap its answer, its validated view); a request refused is a ``Rejection`` (``policies.refusals``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Endpoint = Literal["chat", "completions", "embeddings", "responses", "messages", "count_tokens"]

# The fields that cap an answer's length, as each API's engine reads them: chat's newer name first (vLLM
# reads both), completions' one, the Responses API's one, the Messages API's one (count_tokens: none). The
# field follows the endpoint, never the body: a chat body with a stray ``max_output_tokens`` (or ``input``)
# names no cap the engine reads.
OUTPUT_FIELDS: dict[Endpoint, tuple[str, ...]] = {
    "chat": ("max_completion_tokens", "max_tokens"),
    "completions": ("max_tokens",),
    "responses": ("max_output_tokens",),
    "messages": ("max_tokens",),
    "embeddings": (),
    "count_tokens": (),
}
PROMPT_FIELDS: dict[Endpoint, str] = {"chat": "messages", "completions": "prompt", "responses": "input",
                                      "embeddings": "input", "messages": "messages", "count_tokens": "messages"}


@dataclass(frozen=True, slots=True)
class RequestView:
    """What the proxy needs to know about a validated request without re-reading the body."""

    endpoint: Endpoint
    model: str
    stream: bool
    include_usage: bool
    body: dict[str, Any]

    @property
    def output_fields(self) -> tuple[str, ...]:
        return OUTPUT_FIELDS[self.endpoint]
