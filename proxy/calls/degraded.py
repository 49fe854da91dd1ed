"""The passages answer (``passages_answer``) in place of an error, for a tenant that opts in and a model that
cannot answer: sent by the request's ``ClientAnswer`` with every header the steps reported, and
``x-prefixgate-degraded`` naming why."""

from __future__ import annotations

import time
import uuid

from policies.answers.passages import passages_answer
from proxy.calls.outgoing import Outgoing
from proxy.wire.answer import JSON, SSE, ClientAnswer


async def answer_with_passages(answer: ClientAnswer, out: Outgoing, evidence: str, reason: str) -> None:
    """Answer ``out``'s request with the passages retrieval found for it (``evidence``)."""
    body = passages_answer(evidence, model=out.model, stream=out.stream,
                           answer_id=f"chatcmpl-prefixgate-{uuid.uuid4().hex}", created=int(time.time()))
    answer.headers.degraded(reason)
    await answer.whole(200, SSE if out.stream else JSON, body)
