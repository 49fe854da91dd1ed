"""The Anthropic Messages API as a ``Dialect`` (``/v1/messages``), and its token count
(``/v1/messages/count_tokens``): what Claude Code and the Anthropic SDKs send.

``shape`` runs the chat policies over the system text and the turns (``rewrite_messages``: the billing block
dropped, canonical system text, volatile spans moved to the note on the last user turn), adds the tenant's
passages before the last user turn, and renders the conversation as vLLM does (``messages_conversation``)
for the prompt's pieces and replica choice. Errors are Anthropic's (``ANTHROPIC_ERRORS``: its JSON, its
``event: error``, its ``ping`` keep-alive); ``tap`` reads the stream's end (``message_stop``) and its usage.
Only pools of engines serve it (vLLM serves both routes natively); its answer carries its usage; it is not
kept for exact repeats, nor cut and continued.
"""

from __future__ import annotations

from typing import Any, ClassVar

from policies.prompt.messages import messages_conversation, rewrite_messages
from policies.prompt.stable_prefix import chat_pieces
from policies.request.types import Endpoint
from proxy.auth.tenants import TenantPolicy
from proxy.calls.answer_tap import AnswerTap
from proxy.calls.messages_answer import MessagesAnswer
from proxy.gateway import Gateway
from proxy.http.dialect import Dialect, engines_only, rewritten, with_passages
from proxy.http.prompt import Prompt
from proxy.observability.request_record import RequestRecord
from proxy.upstream.pool import Pool
from proxy.wire.anthropic_errors import ANTHROPIC_ERRORS
from proxy.wire.headers import ResponseHeaders


class Messages(Dialect):
    """``/v1/messages``."""

    endpoint: ClassVar[Endpoint] = "messages"
    upstream_path = "/messages"
    errors = ANTHROPIC_ERRORS
    answers_cached = False
    carries_usage = True

    async def shape(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, retrieve: bool,
                    report: ResponseHeaders, record: RequestRecord, since: float) -> int:
        """The system text and turns made canonical, the tenant's passages before the last user turn (where
        ``retrieve``); the conversation rendered for the pieces. Returns the spans moved."""
        rewrite = rewrite_messages(prompt.received, tenant.prompt)
        prompt.canonical = rewrite.body if rewrite.changed else None
        rewritten(rewrite, report, record, since)
        await with_passages(gateway, prompt, tenant, retrieve, report, record)
        prompt.conversation = messages_conversation(prompt.body)
        prompt.pieces = chat_pieces(prompt.conversation)
        return rewrite.moved

    def may_cut(self, body: dict[str, Any]) -> bool:
        return False

    def check_pool(self, pool: Pool) -> None:
        engines_only(pool, "Messages API")

    def tap(self, gateway: Gateway, tenant: TenantPolicy, body: dict[str, Any], prompt: Prompt) -> AnswerTap | None:
        return MessagesAnswer()

    def placed(self, prompt: Prompt, sent: dict[str, Any]) -> dict[str, Any]:
        """The conversation as the chat template reads it: what an engine holds blocks of."""
        return prompt.conversation if prompt.conversation is not None else sent


class MessagesCountTokens(Messages):
    """``/v1/messages/count_tokens``: the engine counts the prompt as the client sent it; nothing is generated,
    admitted or charged."""

    endpoint = "count_tokens"
    upstream_path = "/messages/count_tokens"
    generates = False

    async def shape(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, retrieve: bool,
                    report: ResponseHeaders, record: RequestRecord, since: float) -> int:
        return 0

    def tap(self, gateway: Gateway, tenant: TenantPolicy, body: dict[str, Any], prompt: Prompt) -> AnswerTap | None:
        return None


MESSAGES, COUNT_TOKENS = Messages(), MessagesCountTokens()
