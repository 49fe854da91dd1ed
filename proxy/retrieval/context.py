"""The retrieval step of a chat request: the tenant's passages go in before its final user message.

After the stable prefix (system prompt, tools, earlier turns), so retrieval never breaks the prefix
the engine has cached. The client learns what happened from two headers: ``x-prefixgate-passages``
(how many, or ``error`` when retrieval failed and the request went on without) and Server-Timing.
"""

from __future__ import annotations

from typing import Any

from policies.retrieval.evidence import question_of, render_evidence, with_evidence
from proxy.config.retrieval import TenantRetrieval
from proxy.observability.request_record import RequestRecord
from proxy.retrieval.retriever import Retriever
from proxy.wire.headers import ResponseHeaders


async def add_context(retriever: Retriever, tenant: str, settings: TenantRetrieval, body: dict[str, Any],
                      headers: ResponseHeaders, record: RequestRecord) -> tuple[dict[str, Any], str | None]:
    """The body with the passages added, and the evidence text (None when there was none)."""
    question = question_of(body)
    if not question:
        return body, None
    retrieved = await retriever.retrieve(tenant, settings, question)
    passages = retrieved.passages
    headers.retrieval(None if passages is None else len(passages), retrieved.server_timing())
    if record.entry is not None:
        stages = retrieved.stages
        record.note(passages=None if passages is None else len(passages),
                    retrieval_ms={stage: round(seconds * 1000, 3) for stage, seconds in stages.items()},
                    retrieval_cache="hit" if "cache" in stages else "joined" if "joined" in stages else "miss")
    if not passages:
        return body, None
    evidence = render_evidence(passages)
    return with_evidence(body, evidence), evidence
