"""The generation routes (chat completions, completions, embeddings, Responses) as bare ASGI apps.

These routes carry nearly all of a gateway's traffic, so they skip Starlette's Request object,
router and middleware wrappers: in the overhead benchmark those cost about a fifth of the CPU of
each request and a wrapper call on every streamed chunk (``FastPath`` hands them their requests).

Each route is one API's ``Dialect``. A request goes through ``Preparation``'s steps, the same for every API,
to an ``UpstreamCall``; its answer is its ``ClientAnswer``'s to write. A step that refuses raises ``Refused``,
and the route answers it in the API's error shape.
"""

from __future__ import annotations

import logging

from starlette.types import Receive, Scope, Send

from policies.refusals import InternalError, Refused
from proxy.calls.outgoing import CLIENT_CLOSED
from proxy.gateway import Gateway
from proxy.http.body import ClientGone
from proxy.http.dialect import Dialect
from proxy.http.preparation import Preparation
from proxy.observability.request_record import RequestRecord
from proxy.wire.answer import ClientAnswer
from proxy.wire.headers import RequestHeaders

log = logging.getLogger("prefixgate")


class GenerationRoute:
    """POST /v1/{chat/completions,completions,embeddings,responses}: one upstream call per request."""

    __slots__ = ("dialect", "upstream_path")

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.upstream_path = dialect.upstream_path  # appended to the replica's base URL (…/v1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway: Gateway = scope["state"]["gateway"]
        record = RequestRecord(gateway.metrics, gateway.access_log, self.upstream_path)
        steps = Preparation(gateway, self.dialect, record)
        client = ClientAnswer(send, steps.headers, self.dialect.errors)
        try:
            call = await steps.run(RequestHeaders.of(scope), receive, client)
        except ClientGone:
            await steps.give_back()
            record.answered(CLIENT_CLOSED)
            return
        except Exception as failure:
            if isinstance(failure, Refused):
                refusal = failure.refusal
            else:
                log.exception("unexpected error handling %s", self.upstream_path)
                refusal = InternalError()
            error = client.errors.error(refusal)
            if isinstance(failure, Refused):
                record.note(error=error.code or error.type, param=error.param)
            await steps.give_back()
            record.answered(error.status)
            await client.fail(refusal)
            return
        if call is not None:  # None: answered from the answer cache
            await call.run(receive, client)
