"""Cost of the prompt rewrite on a ~4,000-token agent prompt (issue 3 target: p50 <= 0.3 ms).

Times what the proxy adds per chat request: rewrite_chat (canonical form, volatile detection and
relocation), the stable-prefix measure against the previous prompt, and the one re-serialization
of the body. Prints p50/p99 for a repeated prompt (the steady state) and for a first-seen one.

    python tests/bench/prompt_cost.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from datetime import date
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from policies.prompt.prompt import PromptPolicy, rewrite_chat
from policies.prompt.stable_prefix import chat_pieces, shared_prefix
from tests.bench import machine

WORDS = ("the agent must check the order status call tools when needed answer in the user's language "
         "never invent tracking numbers escalate refunds above 500 EUR to a human keep answers short").split()


def agent_body(rng: random.Random, template: list[str], target_chars: int = 16_000) -> dict:
    """The same agent system prompt each time, with a fresh clock line and trace ID at its top."""
    while sum(map(len, template)) < target_chars:
        template.append(" ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 20))).capitalize() + ".")
    lines = [f"Current time: 2026-11-22 11:{rng.randrange(60):02d}:{rng.randrange(60):02d} UTC",
             f"trace_id={uuid.UUID(int=rng.getrandbits(128)).hex}", *template]
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Looks things up.",
                                               "parameters": {"type": "object", "properties": {
                                                   "order_id": {"type": "string"}, "verbose": {"type": "boolean"}},
                                                   "required": ["order_id"]}}} for i in range(6)]
    return {"model": "m", "tools": tools, "messages": [
        {"role": "system", "content": "\n".join(lines)}, {"role": "user", "content": "Where is order 1234?"}]}


def timed(body: dict, policy: PromptPolicy, previous: list) -> float:
    """What the gateway adds per chat request: rewrite, stable-prefix measure, one serialization."""
    started = time.perf_counter()
    result = rewrite_chat(body, policy)
    pieces = chat_pieces(result.body)
    shared_prefix(previous[0], pieces)
    previous[0] = pieces
    if result.changed:
        orjson.dumps(result.body)
    return (time.perf_counter() - started) * 1000


def percentiles(samples: list[float]) -> str:
    samples = sorted(samples)
    return f"p50 {samples[len(samples) // 2]:.3f} ms, p99 {samples[int(len(samples) * 0.99)]:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(1)
    template: list[str] = ["You are the ACME support agent."]
    bodies = [agent_body(rng, template) for _ in range(args.runs)]
    policy = PromptPolicy()
    # Cold: a prompt this gateway has never seen (a fresh policy each time, so an empty line cache).
    previous: list = [()]
    cold = [timed(bodies[i], PromptPolicy(), previous) for i in range(min(args.runs, 200))]
    # Warm: the steady state of an app that sends the same system prompt with a fresh time and ID.
    warm = [timed(body, policy, previous) for body in bodies]
    chars = len(bodies[0]["messages"][0]["content"])
    print(f"python tests/bench/prompt_cost.py --runs {args.runs}; run of {date.today().isoformat()} on "
          f"{machine.machine()}")
    print(f"system prompt {chars} chars (~{chars // 4} tokens), 6 tools, fresh time + trace ID per request")
    print(f"  repeated prompt ({args.runs} runs): {percentiles(warm)}")
    print(f"  first-seen prompt ({len(cold)} runs): {percentiles(cold)}")
    print(f"  line cache: {policy.scanner.cache_info()}")


if __name__ == "__main__":
    main()
