"""The generation routes as bare ASGI apps: auth, read, validate, route, relay.

These routes carry nearly all of a gateway's traffic, so they skip Starlette's Request object,
router and middleware wrappers: in the overhead benchmark those cost about a fifth of the CPU of
each request and a wrapper call on every streamed chunk. Everything else stays a Starlette route;
``FastPath`` hands only POSTs to these exact paths to them and the rest to Starlette, which also
mounts the same objects so 405s and odd paths keep Starlette's behaviour.
"""

from __future__ import annotations

import logging
from time import perf_counter, time
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from policies.answer_cache import answer_key as answer_key_for
from policies.answer_cache import cacheable
from policies.evidence import question_of, render_evidence, with_evidence
from policies.input_limits import check_input_limits
from policies.prompt import rewrite_chat
from policies.refusals import InternalError, Refused
from policies.stable_prefix import Pieces, chat_pieces, completion_pieces
from policies.token_caps import cap_output
from policies.types import Endpoint, Rejection
from policies.validate import validate_request
from proxy.admission.request_admission import Admitted
from proxy.caches.answers import send_stored_answer
from proxy.connections.guard import ConnectionGuard
from proxy.gateway import Gateway, TenantPolicy
from proxy.http.body import ClientGone, decode_json, read_body
from proxy.http.errors import openai_error
from proxy.retrieval.retriever import Retriever
from proxy.upstream.call import UpstreamCall
from proxy.upstream.exchange import CLIENT_CLOSED

log = logging.getLogger("prefixgate")


RETRIEVAL_HEADER = b"x-prefixgate-retrieval"  # "off": this request goes without added context
POOL_HEADER = b"x-prefixgate-pool"  # the pool to use, overriding length routing


def _request_headers(scope: Scope) -> tuple[str | None, bytes | None, bool, str | None]:
    """(Authorization, Content-Length, retrieval wanted, pool named) from the raw ASGI header list, in one pass."""
    authorization = length = pool = None
    retrieval = True
    for name, value in scope["headers"]:
        if name == b"authorization":
            authorization = value.decode("latin-1")
        elif name == b"content-length":
            length = value
        elif name == RETRIEVAL_HEADER:
            retrieval = value.strip().lower() != b"off"
        elif name == POOL_HEADER:
            pool = value.decode("latin-1").strip()
    return authorization, length, retrieval, pool


def _with_field(raw: bytes, name: bytes, value: bytes) -> bytes:
    """Add a new top-level field (``value``: JSON) to a JSON object's bytes without parsing and
    re-serializing it.

    Only for a body already decoded as an object that lacks ``name``: its last non-blank byte is
    the closing brace, and an object here is never empty (model and messages are required).
    """
    return raw.rstrip()[:-1] + b',"' + name + b'":' + value + b"}"


async def _add_evidence(
    retriever: Retriever, tenant: TenantPolicy, body: dict, headers: list[tuple[bytes, bytes]],
    entry: dict[str, Any] | None,
) -> tuple[dict, str | None]:
    """The tenant's passages before the final user message; x-prefixgate-passages says how many
    (``error`` when retrieval failed and the request went on without), Server-Timing how long."""
    assert tenant.retrieval is not None
    question = question_of(body)
    if not question:
        return body, None
    retrieved = await retriever.retrieve(tenant.name, tenant.retrieval, question)
    passages = retrieved.passages
    headers.append((b"x-prefixgate-passages", b"error" if passages is None else str(len(passages)).encode()))
    headers.append((b"server-timing", retrieved.server_timing()))
    if entry is not None:
        entry["passages"] = None if passages is None else len(passages)
        stages = retrieved.stages
        entry["retrieval_ms"] = {stage: round(seconds * 1000, 3) for stage, seconds in stages.items()}
        entry["retrieval_cache"] = "hit" if "cache" in stages else "joined" if "joined" in stages else "miss"
    if not passages:
        return body, None
    evidence = render_evidence(passages)
    return with_evidence(body, evidence), evidence


class GenerationRoute:
    """POST /v1/{chat/completions,completions,embeddings}: one upstream exchange per request."""

    __slots__ = ("endpoint", "upstream_path")

    def __init__(self, endpoint: Endpoint, upstream_path: str) -> None:
        self.endpoint = endpoint
        self.upstream_path = upstream_path  # appended to the replica's base URL (…/v1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = perf_counter()
        gateway: Gateway = scope["state"]["gateway"]
        route = self.upstream_path
        metrics = gateway.metrics
        admitted: Admitted | None = None  # set when admission ran: settled when the answer ends
        label, pool_name = "none", "none"  # the request's metric labels, once known
        access_log = gateway.access_log
        entry: dict[str, Any] | None = None if access_log is None else {"ts": round(time(), 3), "route": route}

        def stage(name: str, since: float) -> float:
            """Record a stage that began at ``since`` (metric, and the access-log line); return now."""
            now = perf_counter()
            metrics.observe_stage(name, now - since)
            if entry is not None:
                entry.setdefault("stage_ms", {})[name] = round((now - since) * 1000, 3)
            return now

        def finished(status: int) -> None:
            """A request answered here, without an upstream exchange (refused, or from the answer cache)."""
            seconds = perf_counter() - started
            metrics.observe_request(route, status, seconds, label, pool_name)
            if entry is not None:
                entry.update(status=status, pool=pool_name, duration_ms=round(seconds * 1000, 3))
                access_log.write(entry)  # type: ignore[union-attr]

        try:
            authorization, length, retrieval_wanted, pool_named = _request_headers(scope)
            tenant = gateway.tenants[gateway.keys.tenant_for(authorization)]
            label = metrics.tenant_label(tenant.name)
            mark = stage("auth", started)
            if entry is not None:
                entry["tenant"] = tenant.name
            raw = await read_body(receive, length, gateway.config.server.max_body_bytes)
            decoded = decode_json(raw)
            refused = check_input_limits(self.endpoint, raw, decoded, gateway.input_limits)
            if refused is not None:
                raise Refused(refused)
            view = validate_request(self.endpoint, decoded)
            if isinstance(view, Rejection):
                raise Refused(view)
            mark = stage("request", mark)
            if entry is not None:
                entry.update(model=view.model, stream=view.stream)
            headers: list[tuple[bytes, bytes]] = []
            fallback: str | None = None  # evidence to answer with if the model cannot
            answer_key: str | None = None  # set when this answer is to be stored for exact repeats
            pieces: Pieces | None = None  # the prompt as rendered, for the prefix meter and replica choice
            salt: str | None = None
            if self.endpoint != "embeddings":
                body, changed = view.body, False
                if self.endpoint == "chat":
                    rewrite = rewrite_chat(body, tenant.prompt)
                    body, changed = rewrite.body, rewrite.changed
                    stage("canonicalize", mark)
                    if entry is not None:
                        entry["relocated"] = rewrite.moved
                    headers = [
                        (b"x-prefixgate-volatile", str(rewrite.detected).encode()),
                        (b"x-prefixgate-relocated", str(rewrite.moved).encode()),
                        (b"x-prefixgate-templated", str(rewrite.templated).encode()),
                    ]
                    if tenant.retrieval is not None and gateway.retriever is not None and retrieval_wanted:
                        body, evidence = await _add_evidence(gateway.retriever, tenant, body, headers, entry)
                        changed = changed or evidence is not None
                        if tenant.retrieval.fallback:
                            fallback = evidence
                    pieces = chat_pieces(body)
                    gateway.prefix_meter.observe(tenant.name, pieces, rewrite.moved)
                else:
                    pieces = completion_pieces(body)
                    gateway.prefix_meter.observe(tenant.name, pieces, 0)
                if gateway.admission.needed(tenant.admission):
                    mark = perf_counter()
                    admitted = gateway.admission.prepare(tenant.admission, body, changed, pieces, tenant.name)
                    body, changed = admitted.body, admitted.changed
            predicted = admitted.prediction.p90 if admitted is not None and admitted.prediction is not None else None
            pool, reason = gateway.upstreams.pool_for(view.model, embeddings=self.endpoint == "embeddings",
                                                      predicted_p90=predicted, named=pool_named)
            gateway.metrics.pool_chosen(pool.name, reason)
            hide_usage = view.stream and not view.include_usage and not pool.counts_usage_itself
            pool_name = pool.name
            if self.endpoint != "embeddings":
                caps = pool.caps(tenant.admission.caps.action)
                if caps is not None:
                    capped = cap_output(body, caps)
                    if not isinstance(capped, dict):
                        raise Refused(capped)
                    body, changed = capped, changed or capped is not body
                if admitted is not None:
                    await gateway.admission.charge(tenant.name, tenant.admission, admitted, body, headers)
                    stage("admission", mark)
                if gateway.upstreams.routes_by_length or pool_named is not None:
                    headers.append((b"x-prefixgate-pool", pool.name.encode()))
                salt = tenant.salt.upstream_salt(body.get("cache_salt"))
                if salt is None:
                    if "cache_salt" in body:  # mode off: the engine is not told a client's salt either
                        body, changed = {k: v for k, v in body.items() if k != "cache_salt"}, True
                elif changed or "cache_salt" in body:
                    body, changed = {**body, "cache_salt": salt}, True
                else:
                    raw = _with_field(raw, b"cache_salt", orjson.dumps(salt))
                if hide_usage:  # count tokens from the engine's usage, not from events (``hide_usage_events``)
                    if changed or "stream_options" in body:
                        options = {**(body.get("stream_options") or {}), "include_usage": True}
                        body, changed = {**body, "stream_options": options}, True
                    else:
                        raw = _with_field(raw, b"stream_options", b'{"include_usage":true}')
                if changed:
                    raw = orjson.dumps(body)
                if tenant.answer_ttl is not None and gateway.answers is not None and cacheable(body):
                    answer_key = answer_key_for(tenant.name, body)
                    stored = await gateway.answers.get(answer_key)
                    if stored is not None:
                        await gateway.admission.release(admitted)  # the engine did no work
                        await send_stored_answer(send, stored, stream=view.stream, include_usage=view.include_usage,
                                                 headers=headers)
                        if entry is not None:
                            entry["answer_cache"] = "hit"
                        finished(200)
                        return
                    headers.append((b"x-prefixgate-answer-cache", b"miss"))
                    if entry is not None:
                        entry["answer_cache"] = "miss"
            key = None if pieces is None else pool.affinity_key(pieces, view.model, salt)  # salt: as sent
        except Refused as refused:
            error = openai_error(refused.refusal)
            await gateway.admission.release(admitted)
            if entry is not None:
                entry.update(error=error.code or error.type, param=error.param)
            finished(error.status)
            await error.send(send)
            return
        except ClientGone:
            await gateway.admission.release(admitted)
            finished(CLIENT_CLOSED)
            return
        except Exception:
            log.exception("unexpected error handling %s", route)
            await gateway.admission.release(admitted)
            finished(500)
            await openai_error(InternalError()).send(send)
            return
        call = UpstreamCall(
            pool=pool, key=key, tenant=tenant.name, path=route, body=raw, stream=view.stream,
            route=route, metrics=metrics, started=started, headers=headers,
            model=view.model, fallback=fallback,
            answers=gateway.answers, answer_key=answer_key, answer_ttl=tenant.answer_ttl or 0.0,
            admission=gateway.admission if admitted is not None else None, admitted=admitted,
            log=access_log, entry=entry, hide_usage=hide_usage,
        )
        await call(scope, receive, send)


class FastPath:
    """Send POSTs on the generation paths straight to their routes; everything else to ``app``. It is
    the app uvicorn serves, so it also carries the ``connection_guard`` that the server's protocol
    (``GuardedHttpToolsProtocol``) reports connections to."""

    __slots__ = ("app", "connection_guard", "routes")

    def __init__(self, app: ASGIApp, routes: dict[str, GenerationRoute],
                 connection_guard: ConnectionGuard | None = None) -> None:
        self.app = app
        self.routes = routes
        self.connection_guard = connection_guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.routes.get(scope["path"])
            if route is not None:
                await route(scope, receive, send)
                return
        await self.app(scope, receive, send)
