"""Length routing on real vLLM engines, with a workload whose answer lengths the gateway cannot see.

Two engines (``--max-num-seqs`` batch slots each, so long answers hold slots as they do on a busy GPU) and
seven layouts through prefixgate, each pass sending every layout the same Poisson arrivals of
``tests/bench/length_workload.py`` requests (``--workload``: ``mixed``, seven apps, two of which drift and some of
whose answers straddle the threshold; or ``decisive``, five apps whose answers never straddle it):
  one pool              both engines in one pool (least loaded);
  oracle split          a short pool (engine A) and a long pool (engine B), each request named to the pool its true
                        length belongs to (``x-prefixgate-pool``), no continuation, ``min_recall: 0``: the best a
                        predictor could do;
  predicted split       the same two pools as configured by default (``continue_long: false``): a template whose
                        last ``decided_after`` (8) answers all fell a factor of two to one side of the threshold goes
                        to that side's pool (reason ``history``); the rest by predicted p90 while the short pool's
                        recall reaches ``min_recall``, else the two act as one;
  predicted split, before
                        the same with ``decided_after: 0``: the default before templates were placed by their own
                        history (a gateway without the setting runs it as it is);
  start short, continue long
                        ``continue_long: true``: a request that may be cut starts in the short pool capped at the
                        threshold T and an answer cut there is continued in the long pool, joined for the client;
  predicted split, priority / continue long, priority
                        the two above with ``priority_hints: true`` on both pools (vLLM's ``priority`` = predicted p50).
Every engine runs ``--scheduling-policy priority``; layouts without hints send no ``priority``, so all requests are
priority 0, which vLLM orders first come first served. Each engine's prefix cache is reset before each layout's run,
so no layout finds the prompts the one before it sent. ``--rates`` runs the passes at each rate, interleaved: pass 1
at every rate, then pass 2..., so a slow spell of the machine lands on all rates alike.

How an answer ends at its true length without the gateway reading it: the client body carries the true length in a
field of its own (``bench_true_tokens``), which the gateway forwards unread like any unknown field; a shim in front
of each engine (this script with ``--shim``, a process of its own) turns it into ``max_tokens`` = ``min_tokens``
with ``ignore_eos``: a first leg writes min(true, the body's max_tokens), so one the gateway capped at T stops
there; a continuation (``continue_final_message``) writes the rest, max(1, true - T). The shim drops what a plain
engine need not serve (``tools``, ``response_format``; tool messages become user text) and keeps the prompt within
the engine's context (the head kept, the rest cut at ``PROMPT_CHARS``; a continuation's partial answer kept whole;
true lengths capped at ``MAX_ANSWER``). Before each measured window the gateway sees ``--warmup`` seconds of the
same workload, as a gateway in service has.

Per request the client times, from the scheduled arrival: the first content chunk (TTFT), the end (e2e), and, for
answers longer than T, the gap between content chunks T and T+1 (the seam where an answer is continued; the same
position's ordinary gap in the other layouts). Reported per rate and layout, medians of the passes [range]: short
answers' TTFT p50/p95, long answers' TTFT p95 and e2e p95, the seam gap p50/p95, output tokens/s, the tokens the
long pool's engine was sent again and the answers continued (the gateway's counters, read when the window's first
arrival is due and after its last answer), errors and the gateway's own reading (with the share of requests its
templates' history placed); then the targets, PASS or MISS, and issue 54's for ``predicted split``: short TTFT p95
no worse than one pool's beyond one pool's pass-to-pass range at every rate; on the mixed workload, short TTFT
p95, long e2e p95 and tokens/s no worse than ``predicted split, before``'s beyond its range; on the decisive
workload, >= 0.80 of the oracle's short-p95 gain at the congested rate. Each pass in the result file also says
who paid: the long answers the short pool served (``long_in_short_pool``) and, per app, its short answers' TTFT
p95 and how many of them the short pool served (``by_app``).

    python tests/bench/length_routing.py [--rates 4,6] [--seconds 40] [--warmup 30] [--passes 3] [--layouts 'A;B']
        [--workload mixed|decisive]
    python tests/bench/length_routing.py --engine-urls URL1,URL2 --model NAME --budget S   # engines started elsewhere
    python tests/bench/length_routing.py --render docs/length_routing.json   # the tables again, no engines
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proxy.config.pools import OpenAIPoolConfig  # noqa: E402
from proxy.engine.process import free_port  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.length_workload import WORKLOADS, LengthRequest, workload  # noqa: E402
from tests.bench.open_loop import percentile, schedule  # noqa: E402
from tests.bench.processes import start_engine, start_gateway, stop_gateway  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402
from tests.support.metrics_text import sample_sum  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

MODEL = "prefixgate-tiny"
TRUTH = "bench_true_tokens"
THRESHOLD: int = OpenAIPoolConfig.model_fields["short_threshold"].default
PROMPT_CHARS = 6000  # the tiny model reads 4096 positions: prompt and answer must fit
# ... so a long answer leaves the prompt less: the tiny model's tokenizer makes about 0.53 tokens of a character of
# this workload's text (6,000 characters are 3,192 tokens), so a character of prompt is given up for every two
# tokens of answer past CONTEXT_CHARS. Without it the longest prompts with the longest answers asked for more than
# 4,096 positions, and vLLM refused them (a 400) in every layout that did not cut them at T.
CONTEXT_CHARS = 7400
CHARS_PER_TOKEN = 2
MAX_ANSWER = 1024
MARK = " a"  # the text of every token the client receives (see ``one_per_token``)
RUN_ALLOWANCE_S = 10.0  # a layout's run beyond its arrivals (gateway start, the last answers), until one is measured
Runs = dict[str, list[dict[str, Any]]]  # layout -> one summary per pass


# ---- the shim in front of each engine ------------------------------------------------------------

def leg_tokens(body: dict[str, Any]) -> int:
    """What this leg writes so that the client's answer, both legs counted, has its true length: a first leg stops
    at the true length or the body's cap (T when the gateway starts it short), a continuation writes the rest; the
    gateway cuts a first leg exactly at T, and an engine writes at least one token."""
    true = min(int(body.pop(TRUTH)), MAX_ANSWER)
    if body.get("continue_final_message"):
        return max(1, true - THRESHOLD)
    cap = body.get("max_tokens") or body.get("max_completion_tokens")
    return min(true, int(cap)) if cap else true


def engine_messages(messages: list[dict[str, Any]], continuation: bool, answer: int = 0) -> list[dict[str, str]]:
    """Messages a plain engine serves within its context with an ``answer`` of that many tokens: the head of the
    prompt, PROMPT_CHARS in all, less where the answer needs the room (``CONTEXT_CHARS``). A continuation's last
    message (the answer so far) stays whole, earlier ones share what it leaves, so the engine goes on from the
    text the client already has."""
    plain = []
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else "" if content is None else json.dumps(content)
        plain.append({"role": message.get("role") if message.get("role") in ("system", "user", "assistant")
                      else "user", "content": text})
    last = plain.pop() if continuation and plain else None
    left = min(PROMPT_CHARS, CONTEXT_CHARS - CHARS_PER_TOKEN * answer) - (len(last["content"]) if last else 0)
    kept = []
    for message in plain:
        kept.append({**message, "content": message["content"][:max(left, 0)]})
        left -= len(message["content"])
    return kept + ([last] if last else [])


def engine_copy(body: dict[str, Any]) -> dict[str, Any]:
    """What the engine gets: the leg's length as its limits, a prompt a plain engine can serve;
    ``continue_final_message`` and ``add_generation_prompt`` as the gateway sent them. A stream reports its
    token count in every chunk (``continuous_usage_stats``), which ``one_per_token`` reads and removes."""
    tokens = leg_tokens(body)
    messages = engine_messages(body.get("messages", []), bool(body.get("continue_final_message")), tokens)
    for field in ("tools", "tool_choice", "response_format", "max_completion_tokens"):
        body.pop(field, None)
    if body.get("stream"):
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True,
                                  "continuous_usage_stats": True}
    return {**body, "messages": messages, "max_tokens": tokens, "min_tokens": tokens, "ignore_eos": True}


def one_per_token(event: dict[str, Any], counted: int, usage_asked: bool) -> tuple[list[dict[str, Any]], int]:
    """An engine's stream event as one event per token it carries, each token the text ``MARK``; and the tokens
    counted so far. Why: a random-weight model's tokens are often partial UTF-8 that the engine holds back, and a
    busy engine merges tokens into one event, so the client could not tell token T from its content chunks (the
    seam is there). ``MARK`` is one token of both tokenizers, so a continuation's partial answer is T tokens again.
    The usage the shim asked for is dropped; the last event's, where the gateway asked for it, is kept."""
    usage = event.pop("usage", None)
    choices = event.get("choices") or []
    if not choices:
        return ([{**event, "usage": usage}] if usage_asked and usage else []), counted
    total = int(usage["completion_tokens"]) if usage else counted
    if total <= counted or len(choices) != 1:
        return [event], counted
    choice, copies = choices[0], []
    for index in range(total - counted):
        delta = {**choice.get("delta", {}), "content": MARK} if index == 0 else {"content": MARK}
        last = index == total - counted - 1
        copies.append({**event, "choices": [{**choice, "delta": delta,
                                             "finish_reason": choice.get("finish_reason") if last else None}]})
    return copies, total


async def relay_stream(answer: aiohttp.ClientResponse, response: web.StreamResponse, usage_asked: bool) -> None:
    counted = 0
    async for line in answer.content:
        if line.startswith(b"data: {"):
            events, counted = one_per_token(json.loads(line[6:]), counted, usage_asked)
            for event in events:
                await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        elif line.startswith(b"data:"):
            await response.write(line.rstrip(b"\n") + b"\n\n")


def shim_app(engine: str) -> web.Application:
    session: aiohttp.ClientSession | None = None

    async def relay(request: web.Request) -> web.StreamResponse:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        data, body, usage_asked = await request.read(), None, False
        if request.method == "POST" and request.path.endswith("/chat/completions"):
            body = json.loads(data)
            if TRUTH not in body:  # an error the client counts, not an answer of the wrong length
                return web.json_response({"error": {"message": f"{TRUTH} missing: the gateway dropped it"}},
                                         status=400)
            usage_asked = bool((body.get("stream_options") or {}).get("include_usage"))
            data = json.dumps(engine_copy(body)).encode()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with session.request(request.method, engine + request.path_qs, data=data or None,
                                   headers=headers) as answer:
            response = web.StreamResponse(status=answer.status, headers={
                "Content-Type": answer.headers.get("Content-Type", "application/json")})
            await response.prepare(request)
            if body and body.get("stream") and answer.status == 200:
                await relay_stream(answer, response, usage_asked)
            else:
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", relay)
    return app


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_shim(engine: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with open(workdir / f"shim-{port}.log", "wb") as log:
        process = subprocess.Popen([sys.executable, __file__, "--shim", str(port), engine], stdout=log,
                                   stderr=subprocess.STDOUT, cwd=ROOT)
    return process, f"http://127.0.0.1:{port}"


# ---- the client ----------------------------------------------------------------------------------

def has_content(event: dict[str, Any]) -> bool:
    return any((choice.get("delta") or {}).get("content") for choice in event.get("choices") or ())


async def stream_one(session: aiohttp.ClientSession, url: str, body: dict[str, Any], due: float,
                     headers: dict[str, str]) -> dict[str, Any]:
    """One streamed answer as the client sees it, timed from its scheduled arrival: the first content chunk,
    the end, the content chunks, and the gap between chunks T and T+1 (None when there are not T+1)."""
    status, failed, first, chunks, at_threshold, seam, pool = 0, None, None, 0, 0.0, None, None
    try:
        async with session.post(url, json=body, headers=headers) as response:
            status, pool = response.status, response.headers.get("x-prefixgate-pool")
            if status != 200:
                failed = f"HTTP {status}: {failure_code(await response.read())}"
            async for line in response.content:
                if not line.startswith(b"data: {"):
                    continue
                event = json.loads(line[6:])
                if "error" in event and failed is None:
                    failed = f"error event: {failure_code(line[6:])}"
                if not has_content(event):
                    continue
                now, chunks = time.perf_counter(), chunks + 1
                first = now - due if first is None else first
                if chunks == THRESHOLD:
                    at_threshold = now
                elif chunks == THRESHOLD + 1:
                    seam = now - at_threshold
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        status, failed = status or 599, failed or f"client: {type(error).__name__}"
    if failed is None and first is None:
        failed = "no content"
    return {"ok": status == 200 and failed is None, "failure": failed, "ttft": first,
            "e2e": time.perf_counter() - due, "tokens": chunks, "seam": seam, "pool": pool}


def failure_code(data: bytes) -> str:
    """What an error answer or event names: its code, else its type, else the start of its message."""
    try:
        error = json.loads(data).get("error") or {}
    except (ValueError, AttributeError):
        return data[:80].decode(errors="replace")
    if not isinstance(error, dict):
        return str(error)[:80]
    return str(error.get("code") or error.get("type") or str(error.get("message", ""))[:80])


async def send(session: aiohttp.ClientSession, url: str, request: LengthRequest, due: float,
               headers: dict[str, str], model: str) -> dict[str, Any]:
    true = min(request.true_tokens, MAX_ANSWER)
    body = {**request.body, "model": model, TRUTH: request.true_tokens, "stream": True}
    return {"short": true <= THRESHOLD, "true": true, "app": request.app,
            **await stream_one(session, url, body, due, headers)}


async def metrics_text(session: aiohttp.ClientSession, origin: str, at: float = 0.0) -> str:
    """The gateway's /metrics page, read once ``time.perf_counter()`` reaches ``at``."""
    await asyncio.sleep(max(0.0, at - time.perf_counter()))
    async with session.get(origin + "/metrics") as answer:
        return await answer.text()


async def run_load(origin: str, requests: list[LengthRequest], offsets: list[float], oracle: bool,
                   measured_from: int, model: str) -> tuple[list[dict[str, Any]], float, str, str]:
    """Arrivals at ``offsets``; the outcomes of the requests from ``measured_from`` on, the wall time from the
    first of them to the last answer's end, and the gateway's /metrics at those two moments."""
    url = origin + "/v1/chat/completions"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        start = time.perf_counter() + 0.05
        window = start + (offsets[measured_from] if measured_from < len(offsets) else 0.0)
        before = asyncio.create_task(metrics_text(session, origin, window))
        tasks = []
        for request, offset in zip(requests, offsets, strict=True):
            due = start + offset
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            short = min(request.true_tokens, MAX_ANSWER) <= THRESHOLD
            headers = {"x-prefixgate-pool": "short" if short else "long"} if oracle else {}
            tasks.append(asyncio.create_task(send(session, url, request, due, headers, model)))
        outcomes = list(await asyncio.gather(*tasks))
        ended = time.perf_counter()
        return outcomes[measured_from:], ended - window, await before, await metrics_text(session, origin)


def summary(outcomes: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    done = [o for o in outcomes if o["ok"]]
    short, long = [o for o in done if o["short"]], [o for o in done if not o["short"]]

    def ms(values: list[float], q: float) -> float:
        return percentile(values, q) * 1000 if values else math.nan

    seams = [o["seam"] for o in long if o["seam"] is not None]
    kinds = Counter(o["failure"] for o in outcomes if not o["ok"])
    return {"requests": len(outcomes), "errors": len(outcomes) - len(done), "failures": dict(sorted(kinds.items())),
            "short_ttft_p50_ms": ms([o["ttft"] for o in short], 0.5),
            "short_ttft_p95_ms": ms([o["ttft"] for o in short], 0.95),
            "long_ttft_p50_ms": ms([o["ttft"] for o in long], 0.5),
            "long_ttft_p95_ms": ms([o["ttft"] for o in long], 0.95),
            "long_e2e_p95_ms": ms([o["e2e"] for o in long], 0.95),
            "seam_p50_ms": ms(seams, 0.5), "seam_p95_ms": ms(seams, 0.95), "seams": len(seams),
            # answers with fewer content chunks than tokens asked of the engine (an answer cut and not continued)
            "answers_short_of_true": sum(o["tokens"] < o["true"] for o in done),
            "tokens_per_s": sum(o["tokens"] for o in done) / wall,
            # who pays where the pools are two: long answers a short pool served, and each app's short answers
            "long_in_short_pool": sum(o["pool"] == "short" for o in long),
            "by_app": {app: {"short_answers": len(mine), "short_ttft_p95_ms": ms([o["ttft"] for o in mine], 0.95),
                             "in_short_pool": sum(o["pool"] == "short" for o in mine)}
                       for app in sorted({o["app"] for o in done})
                       for mine in ([o for o in short if o["app"] == app],)}}


CHOICES = "prefixgate_pool_choices_total"


def gateway_reading(before: str, after: str) -> dict[str, float]:
    """What the gateway says of the window: its short pool's recall and split state at the end, the share of
    the window's requests it routed by length, as one pool and started short, the answers it continued and the
    prompt tokens it sent the long pool's engine again for them."""
    def delta(name: str, **labels: str) -> float:
        return sample_sum(after, name, **labels) - sample_sum(before, name, **labels)

    total = delta(CHOICES) or 1.0
    return {"recall": sample_sum(after, "prefixgate_length_short_recall", pool="short"),
            "split": sample_sum(after, "prefixgate_length_split", pool="short"),
            "by_length": delta(CHOICES, reason="length") / total, "merged": delta(CHOICES, reason="merged") / total,
            "start_short": delta(CHOICES, reason="start_short") / total,
            "by_history": delta(CHOICES, reason="history") / total,
            "continued": delta("prefixgate_continued_total"),
            "prefilled_again": delta("prefixgate_continuation_prefill_tokens_total")}


# ---- the layouts ---------------------------------------------------------------------------------

LAYOUTS = ("one pool", "oracle split", "predicted split", "predicted split, before", "predicted split, before, again",
           "start short, continue long", "predicted split, priority", "continue long, priority")
# a continued layout -> the same without continuation, whose long answers start in the long pool: the seam of the
# one is held to the long answers' TTFT of the other
CONTINUED = {"start short, continue long": "predicted split", "continue long, priority": "predicted split, priority"}
OLD_BEHAVIOUR = {"continue_long": False, "priority_hints": False, "decided_after": 0}
NEW, BEFORE = "predicted split", "predicted split, before"  # issue 54: templates placed by their own history
AGAIN = "predicted split, before, again"  # the same layout and arrivals twice in a pass: what the machine's noise does


def layouts(shims: list[str], model: str) -> dict[str, tuple[list[dict[str, Any]], bool]]:
    """Each layout's pools and whether requests name their pool (the oracle)."""
    a, b = (shim + "/v1" for shim in shims)

    def split(priority: bool, **short: Any) -> list[dict[str, Any]]:
        hints = {"priority_hints": True} if priority else {}
        return [{"name": "short", "replicas": [a], "models": [model], "output": "short", **short, **hints},
                {"name": "long", "replicas": [b], "models": [model], "output": "long", **hints}]

    one = [{"name": "mixed", "replicas": [a, b], "models": [model], "balance": "least_loaded"}]
    return {"one pool": (one, False),
            "oracle split": (split(False, continue_long=False, min_recall=0), True),
            "predicted split": (split(False, continue_long=False), False),
            "predicted split, before": (split(False, continue_long=False, decided_after=0), False),
            AGAIN: (split(False, continue_long=False, decided_after=0), False),
            "start short, continue long": (split(False, continue_long=True), False),
            "predicted split, priority": (split(True, continue_long=False), False),
            "continue long, priority": (split(True, continue_long=True), False)}


def for_this_gateway(name: str, pools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pools as this checkout's config reads them: a setting it does not know is left out where its value
    is what the gateway does without it (``continue_long: false``, ``decided_after: 0``), and refused otherwise,
    so the layouts of before continuation or history run against a gateway from before it and the others say
    what they need."""
    known = OpenAIPoolConfig.model_fields
    needed = sorted({key for pool in pools for key, value in pool.items()
                     if key not in known and OLD_BEHAVIOUR.get(key, not value) != value})
    if needed:
        raise SystemExit(f"layout {name!r} needs the pool settings {needed}, which this prefixgate does not have")
    return [{key: value for key, value in pool.items() if key in known} for pool in pools]


def chosen_layouts(shims: list[str], args: argparse.Namespace) -> dict[str, tuple[list[dict[str, Any]], bool]]:
    every = layouts(shims, args.model)
    names = args.layouts.split(";") if args.layouts else list(LAYOUTS)
    unknown = [name for name in names if name not in every]
    if unknown:
        raise SystemExit(f"no such layouts: {unknown}; there are {list(LAYOUTS)}")
    return {name: (for_this_gateway(name, every[name][0]), every[name][1]) for name in LAYOUTS if name in names}


# ---- the experiment ------------------------------------------------------------------------------

def reset_prefix_caches(engines: list[str]) -> None:
    """Each engine forgets the prompts the last layout sent (vLLM's dev endpoint), so no layout inherits them."""
    for origin in engines:
        try:
            httpx.post(origin + "/reset_prefix_cache", timeout=30).raise_for_status()
        except httpx.HTTPError as error:
            print(f"prefix cache of {origin} not reset: {error}", flush=True)


def one_run(pools: list[dict[str, Any]], oracle: bool, arrivals: tuple[list[LengthRequest], list[float], int],
            engines: list[str], workdir: Path, model: str) -> dict[str, Any]:
    """One layout through a fresh gateway: the summary of its measured window and the gateway's reading."""
    requests, offsets, measured_from = arrivals
    reset_prefix_caches(engines)
    gateway, origin = start_gateway({"pools": pools}, workdir, "length-routing")
    try:
        outcomes, wall, before, after = uvloop.run(run_load(origin, requests, offsets, oracle, measured_from, model))
    finally:
        stop_gateway(gateway)
    return {**summary(outcomes, wall), **gateway_reading(before, after)}


def run_pass(rate: float, number: int, chosen: dict[str, tuple[list[dict[str, Any]], bool]], engines: list[str],
             workdir: Path, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every layout at ``rate``, one after the other, each sent the same arrivals (seeded by the pass)."""
    seed = 100 + number
    offsets = schedule(rate, args.warmup + args.seconds, seed)
    arrivals = (workload(seed, len(offsets), args.workload), offsets,
                sum(offset < args.warmup for offset in offsets))
    results = {}
    for name, (pools, oracle) in chosen.items():
        results[name] = one_run(pools, oracle, arrivals, engines, workdir, args.model)
        print(f"rate {rate:g} pass {number + 1} {name}", json.dumps(results[name]), flush=True)
    return results


def passes(args: argparse.Namespace, engines: list[str], shims: list[str], workdir: Path,
           save: Callable[[dict[str, Runs]], None]) -> dict[str, Runs]:
    """The passes, rates interleaved; none is started that would not end within ``--budget`` (estimated from
    the runs so far at that rate, else at any rate, else from the window and an allowance)."""
    chosen = chosen_layouts(shims, args)
    runs: dict[str, Runs] = {}
    took: dict[str, list[float]] = {}
    began = time.monotonic()
    for number in range(args.passes):
        for rate in (float(r) for r in args.rates.split(",")):
            key = f"{rate:g}"
            measured = took.get(key) or [t for times in took.values() for t in times]  # a higher rate's: longer
            per_run = statistics.fmean(measured or [args.warmup + args.seconds + RUN_ALLOWANCE_S])
            left = args.budget - (time.monotonic() - began)
            if args.budget and per_run * len(chosen) > left:
                print(f"no time within --budget for pass {number + 1} at {key}/s "
                      f"(~{per_run * len(chosen):.0f} s, {left:.0f} s left)", flush=True)
                return runs
            started = time.monotonic()
            for name, result in run_pass(rate, number, chosen, engines, workdir, args).items():
                runs.setdefault(key, {}).setdefault(name, []).append(result)
            took.setdefault(key, []).append((time.monotonic() - started) / len(chosen))
            save(runs)
    return runs


def run(args: argparse.Namespace, workdir: Path, save: Callable[[dict[str, Runs]], None]) -> dict[str, Runs]:
    """Engines (started here, or ``--engine-urls``), a shim in front of each, then the passes."""
    engines: list[Any] = []
    origins = args.engine_urls.split(",") if args.engine_urls else []
    if not origins:
        cores = sorted(os.sched_getaffinity(0))
        engines = [start_engine(MODEL, workdir, core=cores[i % len(cores)], name=f"engine{i}",
                                extra_args=["--max-num-seqs", str(args.max_num_seqs), "--scheduling-policy",
                                            "priority"]) for i in range(2)]
    shims: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for engine in engines:
            engine.wait_ready(300)
        origins = origins or [engine.origin for engine in engines]
        shims = [start_shim(origin, workdir) for origin in origins]
        for _, shim in shims:
            wait_until(partial(answers, shim + "/health"), timeout=30, interval=0.1, what=f"the shim at {shim}")
        return passes(args, origins, [shim for _, shim in shims], workdir, save)
    finally:
        for process, _ in shims:
            process.terminate()
        for engine in engines:
            engine.stop()


# ---- the report ----------------------------------------------------------------------------------

def spread(values: list[float]) -> dict[str, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def share(part: float, whole: float) -> float:
    return part / whole if whole else math.nan


def verdict(passed: bool | None) -> str | None:
    return None if passed is None else "PASS" if passed else "MISS"


def no_worse(mine: list[dict[str, Any]], theirs: list[dict[str, Any]], key: str, higher: bool = False
             ) -> dict[str, Any]:
    """Whether a layout's median over the passes is no worse than the other's worst pass: worse beyond the
    other's pass-to-pass range is what the machine's noise does not explain (``higher``: more is better)."""
    median = spread([p.get(key, math.nan) for p in mine])["median"]
    values = [v for v in (p.get(key, math.nan) for p in theirs) if not math.isnan(v)]
    bound = (min(values) if higher else max(values)) if values else math.nan
    known = not math.isnan(median + bound)
    return {"median": median, "bound": bound, "ok": (median >= bound if higher else median <= bound) if known else None}


ISSUE_54 = ("short_ttft_p95_ms", "long_e2e_p95_ms", "tokens_per_s")


def issue_54(runs: Runs, name: str, workload: str, gain_verdict: str | None) -> dict[str, Any]:
    """Issue 54's targets: short TTFT p95 no worse than one pool's beyond its range (every layout, every rate);
    for ``predicted split``, on the mixed workload short TTFT p95, long e2e p95 and tokens/s no worse than
    ``predicted split, before``'s beyond its range, and on the decisive workload >= 0.80 of the oracle's gain."""
    out: dict[str, Any] = {"within_one": no_worse(runs[name], runs["one pool"], "short_ttft_p95_ms")}
    out["within_one_verdict"] = verdict(out["within_one"]["ok"])
    if name == NEW and BEFORE in runs:
        checks = {key: no_worse(runs[name], runs[BEFORE], key, key == "tokens_per_s") for key in ISSUE_54}
        out["vs_before"] = checks
        known = [check["ok"] for check in checks.values() if check["ok"] is not None]
        out["vs_before_verdict"] = verdict(all(known) if known and workload == "mixed" else None)
    if name == NEW:
        out["decisive_gain_verdict"] = gain_verdict if workload == "decisive" else None
    return out


def targets(runs: Runs, name: str, congested: bool, workload: str = "mixed") -> dict[str, Any]:
    """The layout's targets against one pool, pass by pass: the oracle's short-answer p95 gain kept (>= 0.80,
    judged at the congested rate), short p95 never worse than one pool's, long answers' e2e p95 <= 1.25x and
    output tokens/s >= 0.95x one pool's; for a continued layout, the seam gap p95 <= the long answers' TTFT p95
    of the same layout without continuation + 50 ms; issue 54's (``issue_54``)."""
    one, mine = runs["one pool"], runs[name]

    def ratios(key: str, of: Runs | None = None) -> list[float]:
        return [share(m.get(key, math.nan), o.get(key, math.nan)) for o, m in zip(one, of or mine, strict=True)]

    short = ratios("short_ttft_p95_ms")
    out: dict[str, Any] = {"short_p95_vs_one": spread(short),
                           "short_p95_never_worse": verdict(all(r <= 1.0 for r in short) if short else None)}
    if "oracle split" in runs and name != "oracle split":
        oracle = [share(1, r) for r in ratios("short_ttft_p95_ms", runs["oracle split"])]  # its gain, per pass
        # a pass where the oracle gained nothing (one pool was not congested) has no gain to keep a share of
        kept = [(share(1, r) - 1) / (g - 1) for g, r in zip(oracle, short, strict=True) if g > 1]
        out["gain_kept"] = spread(kept) | {"passes": len(kept)}
        out["gain_kept_verdict"] = verdict(statistics.median(kept) >= 0.80 if kept and congested else None)
    for key, metric, passed in (("long_e2e_vs_one", "long_e2e_p95_ms", lambda m: m <= 1.25),
                                ("tokens_vs_one", "tokens_per_s", lambda m: m >= 0.95)):
        out[key] = spread(ratios(metric))
        out[key + "_verdict"] = verdict(None if math.isnan(out[key]["median"]) else passed(out[key]["median"]))
    if CONTINUED.get(name) in runs:
        seam = spread([p["seam_p95_ms"] for p in mine])["median"]
        limit = spread([p["long_ttft_p95_ms"] for p in runs[CONTINUED[name]]])["median"] + 50
        out["seam"] = {"seam_p95_ms": seam, "limit_ms": limit}
        out["seam_verdict"] = verdict(None if math.isnan(seam + limit) else seam <= limit)
    out["issue_54"] = issue_54(runs, name, workload, out.get("gain_kept_verdict"))
    return out


def report(by_rate: dict[str, Runs], workload: str = "mixed") -> dict[str, Any]:
    """Per rate: each layout's medians [range] over the passes and its targets; the highest rate is the
    congested one."""
    congested = max(by_rate, key=float) if by_rate else None
    out: dict[str, Any] = {"congested_rate": congested, "workload": workload, "rates": {}, "passes": by_rate}
    for rate, runs in by_rate.items():
        keys = list(dict.fromkeys(key for passes_ in runs.values() for row in passes_ for key, value in row.items()
                                  if isinstance(value, (int, float))))
        rows = {name: {key: spread([p.get(key, math.nan) for p in passes_]) for key in keys}
                for name, passes_ in runs.items()}
        for name, passes_ in runs.items():  # each failure's kind, over the passes (a pass before kinds: none)
            rows[name]["failures"] = dict(sum((Counter(p.get("failures", {})) for p in passes_), Counter()))
        goals = ({name: targets(runs, name, rate == congested, workload) for name in runs if name != "one pool"}
                 if "one pool" in runs else {})
        out["rates"][rate] = {"layouts": rows, "targets": goals, "passes": min(map(len, runs.values()))}
    return out


def cell(value: dict[str, float] | None, digits: int = 0) -> str:
    if not value or math.isnan(value["median"]):
        return "-"
    return f"{value['median']:.{digits}f} [{value['min']:.{digits}f}-{value['max']:.{digits}f}]"


def cut(row: dict[str, Any]) -> str:
    """Answers that ended with fewer tokens than their true length (cut at T and not continued, say)."""
    value = row.get("answers_short_of_true")
    return "-" if not value else f"{value['median']:.0f}"


def layout_table(rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| layout | short TTFT p50 ms | short TTFT p95 ms | long TTFT p95 ms | long e2e p95 ms | seam gap p50 ms "
             "| seam gap p95 ms | output tokens/s | tokens prefilled again | continued | errors / answers cut short "
             "| the gateway's reading |", "|---" * 12 + "|"]
    for name, row in rows.items():
        reading = "-" if name == "one pool" or "recall" not in row else (
            f"recall {row['recall']['median']:.2f}, by length {row['by_length']['median']:.0%}, as one pool "
            f"{row['merged']['median']:.0%}, started short {row.get('start_short', {}).get('median', 0):.0%}, "
            f"by history {row.get('by_history', {}).get('median', 0):.0%}")
        lines.append(f"| {name} | {cell(row['short_ttft_p50_ms'])} | {cell(row['short_ttft_p95_ms'])} | "
                     f"{cell(row['long_ttft_p95_ms'])} | {cell(row.get('long_e2e_p95_ms'))} | "
                     f"{cell(row.get('seam_p50_ms'))} | {cell(row.get('seam_p95_ms'))} | {cell(row['tokens_per_s'])} | "
                     f"{cell(row.get('prefilled_again'))} | {cell(row.get('continued'))} | "
                     f"{cell(row['errors'])} / {cut(row)} | {reading} |")
    return lines


def passes_of(count: int) -> str:
    return f"{count} pass" + ("" if count == 1 else "es")


def judged(value: str, mark: str | None) -> str:
    return value if mark is None else f"{value} **{mark}**"


def target_table(goals: dict[str, dict[str, Any]], congested: str) -> list[str]:
    lines = [f"| layout | share of the oracle's short-p95 gain kept (>= 0.80 at {congested}/s) | short p95 / one "
             "pool's, worst pass (<= 1.00 in every pass) | long e2e p95 / one pool's (<= 1.25) | output tokens/s / "
             "one pool's (>= 0.95) | seam gap p95 vs long TTFT p95 without continuation + 50 ms |", "|---" * 6 + "|"]
    for name, goal in goals.items():
        kept = goal.get("gain_kept")
        share = "-" if kept is None else judged(f"{cell(kept, 2)} ({passes_of(kept['passes'])})" if kept["passes"]
                                                else "oracle gained in no pass", goal.get("gain_kept_verdict"))
        worst = goal["short_p95_vs_one"]["max"]
        seam = goal.get("seam")
        seam_cell = "-" if seam is None else judged(f"{seam['seam_p95_ms']:.0f} ms vs {seam['limit_ms']:.0f} ms",
                                                    goal.get("seam_verdict"))
        lines.append(f"| {name} | {share} | {judged(f'{worst:.2f}', goal['short_p95_never_worse'])} | "
                     f"{judged(cell(goal['long_e2e_vs_one'], 2), goal['long_e2e_vs_one_verdict'])} | "
                     f"{judged(cell(goal['tokens_vs_one'], 2), goal['tokens_vs_one_verdict'])} | {seam_cell} |")
    return lines


def bound_cell(check: dict[str, Any], higher: bool = False) -> str:
    if math.isnan(check["median"] + check["bound"]):
        return "-"
    return f"{check['median']:.0f} {'>=' if higher else '<='} {check['bound']:.0f}" if check["ok"] else (
        f"{check['median']:.0f} {'<' if higher else '>'} {check['bound']:.0f}")


def issue_table(goals: dict[str, dict[str, Any]], rows: dict[str, dict[str, Any]], congested: str) -> list[str]:
    """Issue 54's targets for the new default and, beside it, today's: a bound is the other layout's worst pass."""
    lines = ["| layout | requests placed by history | short TTFT p95 ms vs one pool's worst pass (no worse beyond its "
             "range, every rate) | vs predicted split, before's worst pass: short TTFT p95 ms; long e2e p95 ms; "
             "tokens/s (mixed workload: no worse beyond its range) | share of the oracle's short-p95 gain kept "
             f"(decisive workload: >= 0.80 at {congested}/s) |", "|---" * 5 + "|"]
    for name in (NEW, BEFORE):
        if name not in goals:
            continue
        goal = goals[name]["issue_54"]
        history = rows[name].get("by_history")
        before = goal.get("vs_before")
        before_cell = "-" if before is None else judged("; ".join(
            bound_cell(before[key], key == "tokens_per_s") for key in ISSUE_54), goal["vs_before_verdict"])
        kept = goals[name].get("gain_kept")
        kept_cell = "-" if not kept or not kept["passes"] else judged(
            f"{cell(kept, 2)} ({passes_of(kept['passes'])})", goal.get("decisive_gain_verdict"))
        lines.append(f"| {name} | {cell({k: v * 100 for k, v in history.items()}) + ' %' if history else '-'} | "
                     f"{judged(bound_cell(goal['within_one']), goal['within_one_verdict'])} | {before_cell} | "
                     f"{kept_cell} |")
    return lines


def pass_table(runs: Runs) -> list[str]:
    """Each pass's short-answer TTFT p95, layout by layout."""
    names = list(runs)
    lines = ["| pass | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for number, row in enumerate(zip(*runs.values(), strict=False), 1):
        lines.append(f"| {number} | " + " | ".join(f"{p.get('short_ttft_p95_ms', math.nan):.0f}" for p in row) + " |")
    return lines


def issue_summary(result: dict[str, Any]) -> list[str]:
    """Issue 54's targets for ``predicted split`` over every rate: PASS where every rate's verdict is."""
    blocks = [block["targets"][NEW]["issue_54"] for block in result["rates"].values()
              if NEW in block["targets"] and BEFORE in block["layouts"]]
    if not blocks:
        return []

    def overall(key: str) -> str:
        marks = [goal.get(key) for goal in blocks if goal.get(key) is not None]
        return "-" if not marks else "**PASS**" if all(mark == "PASS" for mark in marks) else "**MISS**"

    return ["", f"Issue 54, {NEW} on the {result.get('workload', 'mixed')} workload: short TTFT p95 no worse than "
            f"one pool's beyond its range at every rate {overall('within_one_verdict')}; no worse than {BEFORE} "
            f"beyond its range at every rate (mixed workload) {overall('vs_before_verdict')}; >= 0.80 of the "
            f"oracle's gain at {result['congested_rate']}/s (decisive workload) {overall('decisive_gain_verdict')}."]


def markdown(result: dict[str, Any]) -> str:
    parts = []
    workload = result.get("workload", "mixed")
    for rate, block in sorted(result["rates"].items(), key=lambda item: float(item[0])):
        parts += ["", f"**{rate} arrivals/s, {workload} workload** ({passes_of(block['passes'])})", "",
                  *layout_table(block["layouts"])]
        failed = {name: row.get("failures") for name, row in block["layouts"].items() if row.get("failures")}
        if failed:
            parts += ["", "Failures over the passes, by kind: " + "; ".join(
                f"{name}: " + ", ".join(f"{kind} x{count}" for kind, count in kinds.items())
                for name, kinds in failed.items()) + "."]
        if block["targets"]:
            parts += ["", f"Targets at {rate}/s:", "", *target_table(block["targets"], result["congested_rate"])]
        if block["targets"] and BEFORE in block["layouts"]:
            parts += ["", f"Issue 54's targets at {rate}/s:", "",
                      *issue_table(block["targets"], block["layouts"], result["congested_rate"])]
        if AGAIN in block["layouts"]:
            parts += ["", f"Short TTFT p95 ms pass by pass at {rate}/s ({BEFORE} twice: the noise of the same "
                      "layout and arrivals):", "", *pass_table(result["passes"][rate])]
    everywhere = {name: [block["targets"][name]["short_p95_never_worse"] for block in result["rates"].values()
                         if name in block["targets"]] for name in LAYOUTS}
    parts += ["", "Short-answer TTFT p95 no worse than one pool's in every pass at every rate: " + ", ".join(
        f"{name} **{'PASS' if all(mark == 'PASS' for mark in marks) else 'MISS'}**"
        for name, marks in everywhere.items() if marks) + "."] if any(everywhere.values()) else []
    parts += issue_summary(result)
    return "\n".join(parts).strip()


def caption(meta: dict[str, Any]) -> str:
    args = meta["args"]
    engines = (f"Two vLLM engines started elsewhere ({meta['where']})" if args.get("engine_urls")
               else f"Two tiny-model vLLM CPU engines on {meta['machine']}; {meta['vllm']}")
    command = (f"`KIT=.gpu WHEELS=.whl bash tests/bench/gpu_length_routing.sh`, which starts the engines and runs "
               f"`{meta['command']}`" if args.get("engine_urls") else f"`{meta['command'].strip()}`")
    how = ("every engine with `--scheduling-policy priority` (layouts without `priority_hints` send no `priority`: "
           "all requests are priority 0, which vLLM orders first come first served); each engine's prefix cache reset "
           "before each layout" if "rates" in args else "a run from before priority scheduling and cache resets")
    rates = args.get("rates") or f"{args['rate']:g}"
    workload = args.get("workload", "mixed")
    return (f"Command: {command}; run of {meta['date']}. {engines}, {args['max_num_seqs']} batch slots each, {how}. "
            f"{rates.replace(',', ' and ')} arrivals/s of the {WORKLOAD_WORDS[workload]}, {args['warmup']:g} s "
            f"unmeasured then {args['seconds']:g} s measured per layout and pass, every layout the same arrivals in a "
            f"pass, the "
            f"passes of the rates interleaved; short = true length <= {THRESHOLD} tokens (T). The shim hands on "
            f"each token as a chunk of its own, so content chunk n is token n. TTFT is the first content chunk, "
            f"from the scheduled arrival; the seam gap is the time between content chunks T and T+1 "
            f"of answers longer than T (where a continued answer changes engine; elsewhere an ordinary gap); tokens "
            f"prefilled again and continued answers are the gateway's counters between the window's first arrival "
            f"and its last answer; its reading gives the short pool's recall at the end and the shares of the "
            f"window's requests routed by length, as one pool, started short and by their template's history. "
            f"Medians of the passes [range].")


WORKLOAD_WORDS = {"mixed": "mixed length workload (seven apps, two of which drift halfway; about a third of the "
                           "short answers from templates whose lengths straddle the threshold)",
                  "decisive": "decisive length workload (five apps whose answers never straddle the threshold: "
                              "1-3, 8-16 and 30-100 tokens, about 600 and about 900; no max_tokens)"}
assert set(WORKLOAD_WORDS) == set(WORKLOADS)


def publish(out: Path, name: str, meta: dict[str, Any], result: dict[str, Any]) -> None:
    write_result(out, name, meta, result)
    write_block(out, name, f"{caption(meta)}\n\n{markdown(result)}\n\nResult file: `docs/{name}.json`.")


def from_file(path: Path) -> tuple[dict[str, Any], dict[str, Runs]]:
    """A result file's meta and passes by rate (a file from before --rates held one rate's passes)."""
    saved = json.loads(path.read_text())
    meta, found = saved["meta"], saved["results"]["passes"]
    if all(isinstance(passes_, list) for passes_ in found.values()):
        found = {f"{meta['args']['rate']:g}": found}
    meta.setdefault("vllm", machine.vllm_version())
    meta.setdefault("workload", meta["args"].setdefault("workload", "mixed"))  # a file from before --workload
    return meta, found


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="4,6", help="arrivals per second, a comma list")
    parser.add_argument("--seconds", type=float, default=40.0, help="the measured window of a layout's run")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of the workload before it")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--layouts", help=f"only these layouts (a ';' list of {', '.join(LAYOUTS)})")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="mixed",
                        help="tests/bench/length_workload.py's mixed apps, or its decisive ones (never straddling "
                             "the threshold)")
    parser.add_argument("--max-num-seqs", type=int, default=2, help="each engine's batch slots (for the caption "
                                                                    "with --engine-urls)")
    parser.add_argument("--engine-urls", help="two engines started elsewhere (origins, a comma list): none started "
                                              "here; they need --scheduling-policy priority and VLLM_SERVER_DEV_MODE")
    parser.add_argument("--model", default=MODEL, help="the served model name the requests ask for")
    parser.add_argument("--budget", type=float, default=0, help="seconds for all passes; a pass that would not end "
                                                                "within it is not started (0: none)")
    parser.add_argument("--where", help="the caption's engines and machine (default: detected at run time)")
    parser.add_argument("--name", help="docs block and result file stem (default: length_routing, "
                                       "length_routing_decisive for the decisive workload)")
    parser.add_argument("--shim", nargs=2, metavar=("PORT", "ENGINE"), help=argparse.SUPPRESS)
    parser.add_argument("--render", metavar="JSON", help="only write the tables again from this result file")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    return parser.parse_args()


def main() -> None:
    args = arguments()
    if args.shim:
        web.run_app(shim_app(args.shim[1]), host="127.0.0.1", port=int(args.shim[0]), print=None)
        return
    if args.render:  # the tables again from a result file's passes, after a change to how they are summed up
        meta, by_rate = from_file(Path(args.render))
        publish(Path(args.out), Path(args.render).stem, meta, report(by_rate, meta["workload"]))
        print(markdown(report(by_rate, meta["workload"])))
        return
    chosen_layouts(["http://check", "http://check"], args)  # refuse a layout this gateway cannot run before starting
    first = args.engine_urls.split(",")[0] if args.engine_urls else None
    args.name = args.name or ("length_routing" if args.workload == "mixed" else f"length_routing_{args.workload}")
    named = any(arg.split("=", 1)[0] == "--workload" for arg in sys.argv[1:])  # the command names it either way
    meta = {"date": date.today().isoformat(), "machine": machine.machine(), "workload": args.workload,
            "vllm": machine.engine_version(first) if first else machine.vllm_version(),
            "where": args.where or (f"{machine.machine()}; {machine.engine_version(first)}" if first else None),
            "command": command_line("length_routing.py", sys.argv[1:] + ([] if named else
                                                                          ["--workload", args.workload])),
            "args": {k: v for k, v in vars(args).items() if k not in ("shim", "render", "out", "where")}}
    def save(by_rate: dict[str, Runs]) -> None:  # after every pass: a run cut short keeps what it measured
        publish(Path(args.out), args.name, meta, report(by_rate, args.workload))

    by_rate = run(args, Path(tempfile.mkdtemp(prefix="pg-length-routing-")), save)
    save(by_rate)
    print(markdown(report(by_rate, args.workload)))


if __name__ == "__main__":
    main()
