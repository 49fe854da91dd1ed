"""The long fuzz run: 10,000+ generated request bodies (valid, broken, and schemathesis cases from the
OpenAPI document) against a running gateway in front of a fake engine, with new random seeds each
run. Counts answers by kind and writes the figures to docs/reliability.md (block `fuzz`).

    python tests/bench/fuzz.py [--cases 10000] [--out docs/reliability.md]

Fails (exit 1) on any 5xx, any 4xx not in OpenAI's error form, any hang (10 s) or a gateway that
stops answering; prints the first offending body.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from contextlib import ExitStack
from datetime import date
from pathlib import Path

import httpx
import orjson
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from proxy.app import create_app
from tests.bench import machine
from tests.bench.report import write_block, write_result
from tests.support.bodies import broken_request, is_openai_error, valid_request
from tests.support.configs import make_config
from tests.support.fake_upstream import FakeUpstream
from tests.support.openapi_cases import CASES, CHECKS
from tests.support.servers import serve_in_thread

SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


def run(cases: int) -> dict[str, object]:
    statuses: Counter[str] = Counter()
    failures: list[str] = []
    with ExitStack() as stack:
        fake = stack.enter_context(serve_in_thread(FakeUpstream()))
        config = {"pools": [{"name": "p", "replicas": [fake + "/v1"]}], "limits": {"max_tokens": 16}}
        origin = stack.enter_context(serve_in_thread(create_app(make_config(config))))
        client = stack.enter_context(httpx.Client(base_url=origin, timeout=10))
        started = time.monotonic()

        def send(kind: str, request: tuple[str, bytes]) -> None:
            path, body = request
            try:
                answer = client.post(path, content=body, headers={"content-type": "application/json"})
            except httpx.TimeoutException:
                failures.append(f"{kind}: no answer in 10 s: {path} {body[:300]!r}")
                return
            statuses[f"{kind} {answer.status_code}"] += 1
            bad = answer.status_code >= 500 or (kind == "valid" and answer.status_code != 200)
            if answer.status_code >= 400 and not is_openai_error(orjson.loads(answer.content)):
                bad = True
            if bad and len(failures) < 20:
                failures.append(f"{kind}: {answer.status_code} {answer.text[:200]} for {path} {body[:300]!r}")

        share = cases // 5

        @settings(max_examples=share, **SETTINGS)
        @given(request=valid_request())
        def valid(request: tuple[str, bytes]) -> None:
            send("valid", request)

        @settings(max_examples=share * 3, **SETTINGS)
        @given(request=broken_request())
        def broken(request: tuple[str, bytes]) -> None:
            send("broken", request)

        @settings(max_examples=cases - 4 * share, **SETTINGS)
        @given(case=CASES)
        def documented(case: object) -> None:
            try:
                response = case.call_and_validate(base_url=origin, checks=CHECKS, timeout=10)  # type: ignore[attr-defined]
            except (Exception, BaseExceptionGroup) as failure:  # a check failed: keep going, report it
                statuses["schemathesis failed"] += 1
                if len(failures) < 20:
                    failures.append(f"schemathesis: {str(failure)[:400]}")
                return
            statuses[f"schemathesis {response.status_code}"] += 1

        for phase in (valid, broken, documented):
            phase()
        seconds = time.monotonic() - started
        alive = client.post("/v1/chat/completions", json={
            "model": "fake-model", "messages": [{"role": "user", "content": "still there?"}]}).status_code == 200
    return {"statuses": statuses, "failures": failures, "seconds": seconds, "alive": alive}


def report(result: dict[str, object], cases: int) -> str:
    statuses: Counter[str] = result["statuses"]  # type: ignore[assignment]
    total = sum(statuses.values())
    by_kind: dict[str, Counter[str]] = {}
    for key, count in statuses.items():
        kind, status = key.split(" ", 1)
        by_kind.setdefault(kind, Counter())[status] += count
    rows = "\n".join(f"| {kind} | {sum(c.values())} | " + ", ".join(f"{s}: {n}" for s, n in sorted(c.items())) + " |"
                     for kind, c in by_kind.items())
    server_errors = sum(count for key, count in statuses.items() if key.rsplit(" ", 1)[1].startswith("5"))
    return (f"Command: `python tests/bench/fuzz.py --cases {cases}`; one run, {date.today()}, on {machine.machine()} "
            f"({result['seconds']:.0f} s, new random seeds).\n\n"
            f"| kind | bodies | answers by status |\n|---|---|---|\n{rows}\n\n"
            f"{total} bodies; 5xx answers: {server_errors}; failed checks or hangs: "
            f"{len(result['failures'])}; gateway answering afterwards: {'yes' if result['alive'] else 'NO'}.")  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "docs" / "reliability.md")
    args = parser.parse_args()
    result = run(args.cases)
    text = report(result, args.cases)
    print(text)
    for failure in result["failures"]:  # type: ignore[attr-defined]
        print("FAILURE:", failure)
    write_result(args.out, "fuzz", {"date": date.today().isoformat(), "machine": machine.machine(),
                                    "cases": args.cases},
                 {**result, "statuses": dict(result["statuses"])})  # type: ignore[arg-type]
    write_block(args.out, "fuzz", text + "\n\nResult file: `docs/fuzz.json`.")
    return 1 if result["failures"] or not result["alive"] else 0


if __name__ == "__main__":
    sys.exit(main())
