"""Each API the gateway serves, as one object (a ``Dialect``): what ``Preparation`` asks of a request that
differs by API, so its steps are the same for every API and name none.

A dialect says how its body is read and validated (``read``: the endpoint's field checks and input limits,
which also fix the field that caps its output), how its prompt is made canonical and given the tenant's
passages (``shape``), whether its prompt is admitted and planned (``generates``: embeddings are neither),
whether its answers are kept for exact repeats (``answers_cached``), whether its answer carries its usage
(``carries_usage``), whether an answer may be cut and continued (``may_cut``), which pools may serve it
(``check_pool``), what the relay reads of its answer (``tap``), the body a pool places among its replicas
(``placed``), and its error shape (``errors``). Adding an API is one dialect and its tests, and its route
(``proxy.app``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from policies.prompt.prompt import Rewrite, rewrite_chat
from policies.prompt.stable_prefix import chat_pieces, completion_pieces
from policies.refusals import Refused, Rejection
from policies.request.types import Endpoint, RequestView
from policies.routing.continuation import continuable
from proxy.auth.tenants import TenantPolicy
from proxy.calls.answer_tap import AnswerTap
from proxy.gateway import Gateway
from proxy.http.body import checked_request
from proxy.http.prompt import Prompt
from proxy.observability.request_record import RequestRecord
from proxy.retrieval.context import add_context
from proxy.upstream.pool import Pool
from proxy.wire.errors import OPENAI_ERRORS, ErrorShape
from proxy.wire.headers import ResponseHeaders


class Dialect:
    """One API: what differs between APIs along the request's steps. The defaults are chat completions'."""

    endpoint: ClassVar[Endpoint] = "chat"
    upstream_path: ClassVar[str] = "/chat/completions"  # appended to a replica's base URL (…/v1)
    errors: ClassVar[ErrorShape] = OPENAI_ERRORS
    embeds: ClassVar[bool] = False  # served by an embeddings pool
    generates: ClassVar[bool] = True  # a prompt that is admitted, planned for its pool, maybe cut and continued
    answers_cached: ClassVar[bool] = True  # its answers may be stored for exact repeats
    carries_usage: ClassVar[bool] = False  # its answer reports usage unasked (a stream's only when asked)

    def read(self, raw: bytes, gateway: Gateway) -> RequestView:
        """The body decoded once, within the input limits, validated; raises the refusal of the first that fails."""
        return checked_request(self.endpoint, raw, gateway.input_limits)

    async def recall(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, *, keep: bool = True) -> None:
        """What the request continues, read from the gateway's store: nothing, but for the Responses API. ``keep``:
        what is read is kept longer, as a continued conversation is (False: the explainer's read)."""

    async def shape(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, retrieve: bool,
                    report: ResponseHeaders, record: RequestRecord, since: float) -> int:
        """The prompt made canonical (volatile content moved to its end), then the tenant's passages (where
        ``retrieve``), its pieces rendered; returns the volatile spans moved."""
        rewrite = rewrite_chat(prompt.received, tenant.prompt)
        prompt.canonical = rewrite.body if rewrite.changed else None
        rewritten(rewrite, report, record, since)
        evidence = await with_passages(gateway, prompt, tenant, retrieve, report, record)
        if tenant.retrieval is not None and tenant.retrieval.fallback:
            prompt.fallback = evidence
        prompt.pieces = chat_pieces(prompt.body)
        return rewrite.moved

    def may_cut(self, body: dict[str, Any]) -> bool:
        """Whether an answer to ``body`` may be cut in a short pool and continued in the long pool."""
        return continuable(body, self.endpoint)

    def check_pool(self, pool: Pool) -> None:
        """Raise the refusal of a pool that cannot serve this API: every kind serves chat."""

    def tap(self, gateway: Gateway, tenant: TenantPolicy, body: dict[str, Any], prompt: Prompt) -> AnswerTap | None:
        """What the relay reads of the answer in place of chat's framing: nothing."""
        return None

    def placed(self, prompt: Prompt, sent: dict[str, Any]) -> dict[str, Any]:
        """The body whose prompt a pool places among its replicas: the one sent."""
        return sent


async def with_passages(gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, retrieve: bool,
                        report: ResponseHeaders, record: RequestRecord) -> str | None:
    """The tenant's passages before the last user turn of a body with ``messages`` (where it has a collection and
    ``retrieve``): the prompt's ``retrieved`` stage; returns the evidence added, if any."""
    settings = tenant.retrieval
    if settings is None or not retrieve or gateway.retriever is None:
        return None
    retrieved, evidence = await add_context(gateway.retriever, tenant.name, settings, prompt.body, report, record)
    if evidence is not None:
        prompt.retrieved = retrieved
    return evidence


def engines_only(pool: Pool, api: str) -> None:
    """Raise the 400 of a litellm pool asked for ``api``, which only pools of engines serve (a litellm pool's calls
    are chat completions)."""
    if not pool.serves_engine_apis:
        raise Refused(Rejection(400, f"Pool '{pool.name}' (litellm) does not serve the {api}; send "
                                     "/v1/chat/completions to it.", param="model", code="unsupported_endpoint"))


def rewritten(rewrite: Rewrite, report: ResponseHeaders, record: RequestRecord, since: float) -> None:
    """What a prompt's rewrite leaves behind: its stage time, the spans it moved in the access log, its headers."""
    record.stage("canonicalize", since)
    if record.entry is not None:
        record.note(relocated=rewrite.moved)
    report.prompt_rewrite(rewrite.detected, rewrite.moved, rewrite.templated)


class Completions(Dialect):
    """``/v1/completions``: a prompt the gateway sends as written (no rewrite, no passages)."""

    endpoint = "completions"
    upstream_path = "/completions"

    async def shape(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, retrieve: bool,
                    report: ResponseHeaders, record: RequestRecord, since: float) -> int:
        prompt.pieces = completion_pieces(prompt.body)
        return 0


class Embeddings(Dialect):
    """``/v1/embeddings``: to an embeddings pool, as received; no prompt to admit, plan, cut or keep."""

    endpoint = "embeddings"
    upstream_path = "/embeddings"
    embeds = True
    generates = False
    answers_cached = False

    async def shape(self, gateway: Gateway, prompt: Prompt, tenant: TenantPolicy, retrieve: bool,
                    report: ResponseHeaders, record: RequestRecord, since: float) -> int:
        return 0


CHAT, COMPLETIONS, EMBEDDINGS = Dialect(), Completions(), Embeddings()
