"""Cost of the prompt rewrite on a ~4,000-token agent prompt (issue 3 target: p50 <= 0.3 ms).

Times what the proxy adds per chat request: rewrite_chat (canonical form, volatile detection and
relocation) plus the one re-serialization of the body. Prints p50/p99 over many runs.

    python tests/bench/prompt_cost.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import random
import time
import uuid

import orjson

from policies.prompt import PromptPolicy, rewrite_chat

WORDS = ("the agent must check the order status call tools when needed answer in the user's language "
         "never invent tracking numbers escalate refunds above 500 EUR to a human keep answers short").split()


def agent_body(rng: random.Random, target_chars: int = 16_000) -> dict:
    lines = [f"Current time: 2026-11-22 11:{rng.randrange(60):02d}:{rng.randrange(60):02d} UTC",
             f"trace_id={uuid.UUID(int=rng.getrandbits(128)).hex}", "You are the ACME support agent."]
    while sum(map(len, lines)) < target_chars:
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 20))).capitalize() + ".")
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Looks things up.",
                                               "parameters": {"type": "object", "properties": {
                                                   "order_id": {"type": "string"}, "verbose": {"type": "boolean"}},
                                                   "required": ["order_id"]}}} for i in range(6)]
    return {"model": "m", "tools": tools, "messages": [
        {"role": "system", "content": "\n".join(lines)}, {"role": "user", "content": "Where is order 1234?"}]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(1)
    bodies = [agent_body(rng) for _ in range(50)]
    policy = PromptPolicy()
    samples = []
    for i in range(args.runs):
        body = bodies[i % len(bodies)]
        started = time.perf_counter()
        result = rewrite_chat(body, policy)
        if result.changed:
            orjson.dumps(result.body)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    chars = len(bodies[0]["messages"][0]["content"])
    print(f"system prompt {chars} chars (~{chars // 4} tokens), 6 tools, {args.runs} runs: "
          f"p50 {samples[len(samples) // 2]:.3f} ms, p99 {samples[int(len(samples) * 0.99)]:.3f} ms")


if __name__ == "__main__":
    main()
