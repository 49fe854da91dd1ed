"""Length routing on real vLLM CPU engines, with a workload whose answer lengths the gateway cannot see.

Two tiny-model engines (``--max-num-seqs`` batch slots each, so long answers hold slots as they do on a
busy GPU) and three layouts through prefixgate, each pass sending all three the same Poisson arrivals of
``tests/bench/length_workload.py`` requests:
  one pool      both engines in one pool (least loaded);
  oracle split  a short pool (engine A) and a long pool (engine B), each request named to the pool its true
                length belongs to (``x-prefixgate-pool``): the best a predictor could do;
  predicted     the same two pools, prefixgate choosing by its own prediction, as configured by default: the
                split holds only while the short pool's measured recall is at least ``min_recall`` (0.95),
                else the two pools take requests as one (``prefixgate_length_split`` 0);
  predicted, always split
                the same with ``min_recall: 0``: every request goes where its prediction says.

How an answer ends at its true length without the gateway reading it: the client body carries the true
length in a field of its own (``bench_true_tokens``), which the gateway forwards unread like any unknown
field; a shim in front of each engine (this script with ``--shim``, a process of its own) moves it into
``max_tokens`` = ``min_tokens`` with ``ignore_eos``, drops what the tiny model's engine cannot serve
(``tools``, ``response_format``; tool messages become user text) and keeps the prompt within the engine's
context (the head kept, the rest cut at ``PROMPT_CHARS``; true lengths capped at ``MAX_ANSWER``). Before each
measured window the gateway sees ``--warmup`` seconds of the same workload, as a gateway in service has.

Reported per layout: TTFT p50/p95 of truly short answers (<= the short pool's threshold) and of long ones,
output tokens per second, the gateway's own reading at the end (its measured recall, the share of requests it
routed by length and as one pool), and per pass the short-answer TTFT p95 against one pool's; medians of
``--passes`` passes with their ranges. Target: prediction keeps >= 80 % of the oracle's short-answer gain and
never makes short answers worse than one pool.

    python tests/bench/length_routing.py [--rate 4] [--seconds 40] [--warmup 45] [--passes 3] [--max-num-seqs 2]
    python tests/bench/length_routing.py --render docs/length_routing.json   # the tables again, no engines
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
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

from proxy.config.pools import PoolConfig  # noqa: E402
from proxy.engine.process import free_port  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.length_workload import LengthRequest, workload  # noqa: E402
from tests.bench.open_loop import percentile, schedule  # noqa: E402
from tests.bench.processes import start_engine, start_gateway, stop_gateway  # noqa: E402
from tests.bench.report import write_block, write_result  # noqa: E402
from tests.bench.routing import _send as stream_one  # noqa: E402
from tests.support.metrics_text import sample_sum  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

MODEL = "prefixgate-tiny"
TRUTH = "bench_true_tokens"
THRESHOLD: int = PoolConfig.model_fields["short_threshold"].default
PROMPT_CHARS = 6000  # the tiny model reads 4096 positions: prompt and answer must fit
MAX_ANSWER = 1024


# ---- the shim in front of each engine ------------------------------------------------------------

def engine_copy(body: dict[str, Any]) -> dict[str, Any]:
    """What the engine gets: the true length as its limits, a prompt the tiny model can serve."""
    true = min(int(body.pop(TRUTH)), MAX_ANSWER)
    messages, left = [], PROMPT_CHARS
    for message in body.get("messages", []):
        role = message.get("role") if message.get("role") in ("system", "user", "assistant") else "user"
        content = message.get("content")
        text = content if isinstance(content, str) else "" if content is None else json.dumps(content)
        messages.append({"role": role, "content": text[:max(left, 0)]})
        left -= len(text)
    for field in ("tools", "tool_choice", "response_format", "max_completion_tokens"):
        body.pop(field, None)
    return {**body, "messages": messages, "max_tokens": true, "min_tokens": true, "ignore_eos": True}


def shim_app(engine: str) -> web.Application:
    session: aiohttp.ClientSession | None = None

    async def relay(request: web.Request) -> web.StreamResponse:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        data = await request.read()
        if request.method == "POST" and request.path.endswith("/chat/completions"):
            data = json.dumps(engine_copy(json.loads(data))).encode()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with session.request(request.method, engine + request.path_qs, data=data or None,
                                   headers=headers) as answer:
            response = web.StreamResponse(status=answer.status, headers={
                "Content-Type": answer.headers.get("Content-Type", "application/json")})
            await response.prepare(request)
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


# ---- the load ------------------------------------------------------------------------------------

async def send(session: aiohttp.ClientSession, url: str, request: LengthRequest, due: float,
               headers: dict[str, str]) -> dict[str, Any]:
    short = min(request.true_tokens, MAX_ANSWER) <= THRESHOLD
    body = {**request.body, "model": MODEL, TRUTH: request.true_tokens, "stream": True}
    outcome = await stream_one(session, url, body, "short" if short else "long", due, headers)
    return {"short": short, "status": outcome.status, "ttft": outcome.ttft, "tokens": outcome.chunks}


async def run_load(origin: str, requests: list[LengthRequest], offsets: list[float], oracle: bool,
                   measured_from: int) -> tuple[list[dict[str, Any]], float]:
    """Arrivals at ``offsets``; outcomes of the requests from ``measured_from`` on, and their wall time."""
    url = origin + "/v1/chat/completions"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        start = time.perf_counter() + 0.05
        tasks = []
        for request, offset in zip(requests, offsets, strict=False):
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            short = min(request.true_tokens, MAX_ANSWER) <= THRESHOLD
            headers = {"x-prefixgate-pool": "short" if short else "long"} if oracle else {}
            tasks.append(asyncio.create_task(send(session, url, request, due, headers)))
        outcomes = list(await asyncio.gather(*tasks))
    window_start = offsets[measured_from] if measured_from < len(offsets) else 0.0
    return outcomes[measured_from:], time.perf_counter() - start - window_start


def summary(outcomes: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    done = [o for o in outcomes if o["status"] == 200 and o["ttft"] is not None]

    def ms(short: bool, q: float) -> float:
        values = [o["ttft"] for o in done if o["short"] == short]
        return percentile(values, q) * 1000 if values else float("nan")

    return {"requests": len(outcomes), "errors": len(outcomes) - len(done),
            "short_ttft_p50_ms": ms(True, 0.5), "short_ttft_p95_ms": ms(True, 0.95),
            "long_ttft_p50_ms": ms(False, 0.5), "long_ttft_p95_ms": ms(False, 0.95),
            "tokens_per_s": sum(o["tokens"] for o in done) / wall}


# ---- the experiment ------------------------------------------------------------------------------

PREDICTED = ("predicted split", "predicted, always split")


def layouts(shims: list[str]) -> dict[str, tuple[list[dict[str, Any]], bool]]:
    a, b = (shim + "/v1" for shim in shims)

    def split(min_recall: float | None) -> list[dict[str, Any]]:
        short = {"name": "short", "replicas": [a], "models": [MODEL], "output": "short"}
        return [short if min_recall is None else {**short, "min_recall": min_recall},
                {"name": "long", "replicas": [b], "models": [MODEL], "output": "long"}]

    return {"one pool": ([{"name": "mixed", "replicas": [a, b], "models": [MODEL], "balance": "least_loaded"}], False),
            "oracle split": (split(0), True), PREDICTED[0]: (split(None), False), PREDICTED[1]: (split(0), False)}


def gateway_reading(origin: str) -> dict[str, float]:
    """What the gateway says of its own routing: the short pool's recall and split state, and the share
    of requests it routed by length or as one pool."""
    text = httpx.get(origin + "/metrics", timeout=10).text
    choices = {reason: sample_sum(text, "prefixgate_pool_choices_total", reason=reason)
               for reason in ("length", "merged", "named", "model")}
    total = sum(choices.values()) or 1.0
    return {"recall": sample_sum(text, "prefixgate_length_short_recall", pool="short"),
            "split": sample_sum(text, "prefixgate_length_split", pool="short"),
            "by_length": choices["length"] / total, "merged": choices["merged"] / total}


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cores = sorted(os.sched_getaffinity(0))
    engines = [start_engine(MODEL, workdir, core=cores[i % len(cores)], name=f"engine{i}",
                            extra_args=["--max-num-seqs", str(args.max_num_seqs)]) for i in range(2)]
    shims: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for engine in engines:
            engine.wait_ready(300)
        shims = [start_shim(engine.origin, workdir) for engine in engines]
        for _, origin in shims:
            wait_until(partial(answers, origin + "/health"), timeout=30, interval=0.1, what=f"the shim at {origin}")
        runs: dict[str, list[dict[str, Any]]] = {}
        for number in range(args.passes):
            seed = 100 + number
            offsets = schedule(args.rate, args.warmup + args.seconds, seed)
            requests = workload(seed, len(offsets))
            measured_from = sum(offset < args.warmup for offset in offsets)
            for name, (pools, oracle) in layouts([origin for _, origin in shims]).items():
                gateway, origin = start_gateway({"pools": pools}, workdir, "length-routing")
                try:
                    outcomes, wall = uvloop.run(run_load(origin, requests, offsets, oracle, measured_from))
                    reading = gateway_reading(origin)
                finally:
                    stop_gateway(gateway)
                runs.setdefault(name, []).append({**summary(outcomes, wall), **reading})
                print("pass", number + 1, name, json.dumps(runs[name][-1]), flush=True)
    finally:
        for process, _ in shims:
            process.terminate()
        for engine in engines:
            engine.stop()
    return runs


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def report(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows = {name: {key: spread([p[key] for p in passes]) for key in passes[0]} for name, passes in runs.items()}
    one = runs["one pool"]
    gains = {name: [o["short_ttft_p95_ms"] / s["short_ttft_p95_ms"] for o, s in zip(one, runs[name], strict=True)]
             for name in ("oracle split", *PREDICTED) if name in runs}
    # a pass where the oracle gained nothing (one pool was not congested) has no gain to keep a share of
    kept = {name: [(p - 1) / (o - 1) for o, p in zip(gains["oracle split"], gains[name], strict=True) if o > 1]
            for name in PREDICTED if name in gains}
    return {"layouts": rows, "short_p95_gain_over_one_pool": {k: spread(v) for k, v in gains.items()},
            "share_of_oracle_gain_kept": {k: spread(v) if v else None for k, v in kept.items()},
            "kept_passes": len(kept[PREDICTED[0]]), "passes": runs}


def table(result: dict[str, Any]) -> str:
    def cell(value: dict[str, float], digits: int = 0) -> str:
        return f"{value['median']:.{digits}f} [{value['min']:.{digits}f}-{value['max']:.{digits}f}]"

    def routed(row: dict[str, Any]) -> str:
        if "recall" not in row:
            return "-"
        return (f"recall {row['recall']['median']:.2f}, by length {row['by_length']['median']:.0%}, as one pool "
                f"{row['merged']['median']:.0%}")

    lines = ["| layout | short TTFT p50 ms | short TTFT p95 ms | long TTFT p50 ms | long TTFT p95 ms | output tokens/s "
             "| errors | the gateway's reading |", "|---|---|---|---|---|---|---|---|"]
    for name, row in result["layouts"].items():
        lines.append(f"| {name} | {cell(row['short_ttft_p50_ms'])} | {cell(row['short_ttft_p95_ms'])} | "
                     f"{cell(row['long_ttft_p50_ms'])} | {cell(row['long_ttft_p95_ms'])} | "
                     f"{cell(row['tokens_per_s'])} | {row['errors']['median']:.0f} | "
                     f"{routed(row) if name in PREDICTED else '-'} |")
    gains, kept = result["short_p95_gain_over_one_pool"], result["share_of_oracle_gain_kept"]
    lines += ["", "Short-answer TTFT p95, one pool / layout, per pass: " + ", ".join(
        f"{name} **{cell(gain, 2)}x**" for name, gain in gains.items()) + f". Share of the oracle's gain kept, over "
        f"the {result['kept_passes']} passes where the oracle gained: " + ", ".join(
        f"{name} " + (f"**{cell(share, 2)}**" if share else "none") for name, share in kept.items())
        + " (target >= 0.80, and >= 1.00x)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=3.0, help="arrivals per second")
    parser.add_argument("--seconds", type=float, default=40.0, help="the measured window of a pass")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds of the workload before it")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--max-num-seqs", type=int, default=2, help="each engine's batch slots")
    parser.add_argument("--shim", nargs=2, metavar=("PORT", "ENGINE"), help=argparse.SUPPRESS)
    parser.add_argument("--render", metavar="JSON", help="only write the tables again from this result file")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    if args.shim:
        web.run_app(shim_app(args.shim[1]), host="127.0.0.1", port=int(args.shim[0]), print=None)
        return
    if args.render:  # the tables again from a result file's passes, after a change to how they are summed up
        saved = json.loads(Path(args.render).read_text())
        result, command, args = report(saved["results"]["passes"]), saved["meta"]["command"], argparse.Namespace(
            **{**saved["meta"]["args"], "out": args.out})
    else:
        workdir = Path(tempfile.mkdtemp(prefix="pg-length-routing-"))
        result = report(run(args, workdir))
        command = "python tests/bench/length_routing.py " + " ".join(sys.argv[1:])
    when = date.today().isoformat()
    caption = (f"Command: `{command.strip()}`; run of {when} on {machine.machine()}; {machine.vllm_version()}. Two "
               f"tiny-model vLLM CPU engines, {args.max_num_seqs} batch slots each; {args.rate:g} arrivals/s of the "
               f"length workload, {args.warmup:g} s unmeasured then {args.seconds:g} s measured per layout and pass, "
               f"every layout the same arrivals in a pass; short = true length <= {THRESHOLD} tokens; medians of "
               f"{args.passes} passes [range].")
    write_result(Path(args.out), "length_routing", {"date": when, "machine": machine.machine(), "command": command,
                                                     "args": {k: v for k, v in vars(args).items()
                                                              if k not in ("shim", "render", "out")}},
                 result)
    write_block(Path(args.out), "length_routing", caption + "\n\n" + table(result) +
                "\n\nResult file: `docs/length_routing.json`.")
    print(table(result))


if __name__ == "__main__":
    main()
