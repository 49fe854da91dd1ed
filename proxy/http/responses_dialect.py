"""The Responses API as a ``Dialect``: what its requests do that a chat's do not.

``recall`` builds a continued conversation from the tenant's stored response; ``shape`` runs the chat
rewrite and retrieval over this turn's input (``rewrite_responses``, ``input_messages``) and renders the
conversation as the chat template reads it, for the prompt's pieces and replica choice; ``tap`` is what
the relay reads of the answer and keeps of it (``ResponsesAnswer``). Only pools of engines serve it, its
answer carries its usage, and it is not kept for exact repeats (a response is stored as a turn instead).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from policies.prompt.responses import (
    StoredResponse,
    continued,
    conversation_items,
    conversation_too_long,
    input_items,
    input_messages,
    response_not_found,
    responses_messages,
    rewrite_responses,
    with_input_messages,
)
from policies.prompt.stable_prefix import chat_pieces
from policies.refusals import Refused
from proxy.auth.tenants import TenantPolicy
from proxy.calls.answer_tap import AnswerTap
from proxy.conversations.answer import ResponsesAnswer
from proxy.conversations.store import ResponseStore
from proxy.gateway import Gateway
from proxy.http.dialect import Dialect, engines_only, rewritten
from proxy.http.prompt import Prompt
from proxy.observability.request_record import RequestRecord
from proxy.retrieval.context import add_context
from proxy.upstream.pool import Pool
from proxy.wire.headers import ResponseHeaders


class Responses(Dialect):
    """``/v1/responses``."""

    endpoint = "responses"
    upstream_path = "/responses"
    answers_cached = False
    carries_usage = True

    async def recall(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, *, keep: bool = True) -> None:
        """A turn with ``previous_response_id``: the whole conversation, from the tenant's stored turns: the one named,
        then in one more read the earlier ones it links to (each kept ``ttl_s`` from now where ``keep``; the
        explainer's read keeps nothing). Raises the 404 of an id this tenant has no response under (the one named, or
        an earlier turn deleted or gone), the 400 of a conversation longer than a request may be
        (``server.max_messages`` items), or the store's 503."""
        previous = prompt.body.get("previous_response_id")
        if previous is None:
            return
        read = gateway.responses.recall if keep else partial(_peek, gateway.responses)
        (stored,) = await read(tenant.name, (previous,))
        if stored is None:
            raise Refused(response_not_found(previous, "previous_response_id"))
        limit = gateway.input_limits.max_messages
        if len(stored.earlier) > limit:  # each turn adds an item at least: too long before a read of them
            raise Refused(conversation_too_long(len(stored.earlier), limit))
        turns = await read(tenant.name, stored.earlier)
        found = [turn for turn in turns if turn is not None]
        if len(found) < len(turns):
            gone = next(turn_id for turn_id, turn in zip(stored.earlier, turns, strict=True) if turn is None)
            raise Refused(response_not_found(gone, "previous_response_id"))
        items = conversation_items([*found, stored])
        whole = len(items) + len(input_items(prompt.received["input"]))  # with this turn's own
        if whole > limit:
            raise Refused(conversation_too_long(whole, limit))
        prompt.recalled = continued(prompt.received, items)
        prompt.history = len(items)
        prompt.previous = previous
        prompt.earlier = (*stored.earlier, previous)

    async def shape(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, retrieve: bool,
                    report: ResponseHeaders, record: RequestRecord, since: float) -> int:
        """This turn's instructions and input made canonical, the tenant's passages before its last user
        input (where ``retrieve``); the conversation rendered for the pieces. Returns the spans moved."""
        rewrite = rewrite_responses(prompt.body, tenant.prompt, prompt.history)
        if rewrite.changed:
            prompt.canonical = rewrite.body
        rewritten(rewrite, report, record, since)
        settings = tenant.retrieval
        if settings is not None and retrieve and gateway.retriever is not None:
            turn, evidence = await add_context(gateway.retriever, tenant.name, settings,
                                               input_messages(prompt.body, prompt.history), report, record)
            if evidence is not None:
                prompt.retrieved = with_input_messages(prompt.body, turn["messages"], prompt.history)
        prompt.conversation = responses_messages(prompt.body)
        prompt.pieces = chat_pieces(prompt.conversation)
        return rewrite.moved

    def check_pool(self, pool: Pool) -> None:
        engines_only(pool, "Responses API")

    def tap(self, gateway: Gateway, tenant: TenantPolicy, body: dict[str, Any], prompt: Prompt) -> AnswerTap | None:
        """What the relay reads of the answer; it keeps the response (the items this turn added, linked to the
        turns recalled) unless the request says ``store: false``."""
        store = gateway.responses if body.get("store") is not False else None
        return ResponsesAnswer(store, tenant.name, body, prompt.previous, prompt.history, prompt.earlier)

    def placed(self, prompt: Prompt, sent: dict[str, Any]) -> dict[str, Any]:
        """The conversation as the chat template reads it: what an engine holds blocks of."""
        return prompt.conversation if prompt.conversation is not None else sent


async def _peek(store: ResponseStore, tenant: str, response_ids: tuple[str, ...]) -> list[StoredResponse | None]:
    """Stored turns read as they are, their expiry left alone (``recall`` keeps each one longer)."""
    return [await store.get(tenant, response_id) for response_id in response_ids]


RESPONSES = Responses()
