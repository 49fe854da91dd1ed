"""What routing by KV events costs the gateway: per request, the prompt's tokens and the index lookup; per
engine event, applying it.

Per request (``balance: kv_events``): render the chat with the model's template, then walk it
(``PrefixWalk``: tokenize, key and look up a chunk at a time, as far as a replica holds it), on a chat
of a system prompt of about ``--prompt-tokens`` tokens and a new question each time, against an index
holding the system prompt's blocks on one replica of four and other prompts' blocks on all of them;
beside it, a prompt held nowhere, and the whole prompt tokenized and looked up without the walk. Per event: a
``BlockStored`` batch of 16 blocks decoded (msgspec) and applied, then removed; the engines' peak event
rate is their prefill rate over the block size, so the CPU per second at that rate follows.

The tokenizer is the tiny model's (a byte-level BPE of 4,096 tokens, the engine's own in the tests); a
production tokenizer's vocabulary is larger, so the same text is fewer tokens and blocks.

    python tests/bench/kv_lookup_cost.py [--prompt-tokens 4000] [--calls 400] [--runs 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.routing.kv_blocks import HeldBlocks, block_keys  # noqa: E402
from proxy.engine.tiny_model import ensure_tiny_model  # noqa: E402
from proxy.kv_events.messages import BlockRemoved, BlockStored, KVEventBatch  # noqa: E402
from proxy.kv_events.prefix_walk import PrefixWalk  # noqa: E402
from proxy.kv_events.prompt_tokens import PromptTokens  # noqa: E402
from proxy.kv_events.subscriber import EventFeed  # noqa: E402
from tests.bench import machine  # noqa: E402
from tests.bench.length_workload import WORDS  # noqa: E402
from tests.bench.report import command_line, write_block, write_result  # noqa: E402

BLOCK = 128  # the CPU engine's block size
SALT = "0123456789abcdef0123456789abcdef"


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def system_prompt(tokens: PromptTokens, target: int) -> str:
    """Rules until the rendered chat is about ``target`` tokens."""
    rng, text = random.Random(7), "You are the assistant of the billing team."
    while len(tokens.of_chat([{"role": "system", "content": text}])) < target:
        text += f"\nRule: {words(rng, 30)}."
    return text


def filled_index(tokens: PromptTokens, system: str) -> HeldBlocks:
    """Four replicas: the system prompt's blocks on replica 0, 200 other prompts' blocks on each."""
    index = HeldBlocks(4)
    held_tokens = tokens.of_chat([{"role": "system", "content": system}])
    count = len(held_tokens) // BLOCK
    index.stored(0, None, [f"p{n}" for n in range(count)], held_tokens[:count * BLOCK], BLOCK,
                 [[SALT]] + [None] * (count - 1))
    rng = random.Random(11)
    for replica in range(4):
        for prompt in range(200):
            filler = [rng.randrange(4096) for _ in range(4 * BLOCK)]
            index.stored(replica, None, [f"f{replica}-{prompt}-{n}" for n in range(4)], filler, BLOCK)
    return index


def per_request(tokens: PromptTokens, system: str, calls: int) -> dict[str, float]:
    """Microseconds per request, p50 (and p99 of the total) over ``calls`` requests, of: rendering the chat,
    then the chunked walk (``PrefixWalk``: tokenizing, keying and looking up only as far as a replica holds
    the prompt) when the system prompt is held and the question new; the same for a prompt nobody holds
    (a new system prompt each time); and, for comparison, tokenizing the whole prompt and looking it up."""
    index, walk, rng = filled_index(tokens, system), PrefixWalk(tokens), random.Random(13)
    times: dict[str, list[float]] = {"render": [], "walk_held": [], "walk_cold": [], "whole": [], "total": []}
    for _ in range(calls):
        question = [{"role": "user", "content": words(rng, 40) + "?"}]
        start = time.perf_counter()
        text, special = tokens.rendered({"messages": [{"role": "system", "content": system}, *question]}) or ("", False)
        rendered = time.perf_counter()
        held = walk.held(index, text, special, BLOCK, SALT)
        walked = time.perf_counter()
        cold, _ = tokens.rendered({"messages": [{"role": "system", "content": words(rng, 600)}, *question]}) or ("", 0)
        cold_start = time.perf_counter()
        walk.held(index, cold, special, BLOCK, SALT)
        cold_done = time.perf_counter()
        whole = index.held(block_keys(tokens.encode(text, special=False), BLOCK, SALT))
        whole_done = time.perf_counter()
        assert held == whole and held[0] > 0  # the walk finds what the whole prompt's tokens find
        for name, value in (("render", rendered - start), ("walk_held", walked - rendered), ("total", walked - start),
                            ("walk_cold", cold_done - cold_start), ("whole", whole_done - cold_done)):
            times[name].append(value * 1e6)
    row = {f"{name}_p50_us": statistics.median(values) for name, values in times.items()}
    row["total_p99_us"] = sorted(times["total"])[int(0.99 * len(times["total"]))]
    row["tokens"] = len(tokens.encode(text, special=False))
    row["chars"] = len(text)
    return row


def per_event(batches: int = 300) -> float:
    """Microseconds of CPU per block stored and later removed (decode + index), in batches of 16 blocks."""
    encoder, rng = msgspec.msgpack.Encoder(), random.Random(5)
    feed = EventFeed(0, "tcp://unused", HeldBlocks(1, max_blocks=1 << 30))
    payloads = []
    for number in range(batches):
        hashes = [rng.getrandbits(64) for _ in range(16)]
        stored = BlockStored(block_hashes=hashes, parent_block_hash=None,
                             token_ids=[rng.randrange(4096) for _ in range(16 * BLOCK)], block_size=BLOCK)
        payloads.append(encoder.encode(KVEventBatch(ts=0.0, events=[stored])))
        payloads.append(encoder.encode(KVEventBatch(ts=0.0, events=[BlockRemoved(block_hashes=hashes)])))
        del number
    start = time.process_time()
    for seq, payload in enumerate(payloads):
        feed.apply(seq, payload)
    return (time.process_time() - start) * 1e6 / (16 * batches)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt-tokens", type=int, default=4000)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    tokens = PromptTokens(str(ensure_tiny_model(Path(tempfile.mkdtemp(prefix="kv-cost-")))))
    system = system_prompt(tokens, args.prompt_tokens)
    per_request(tokens, system, 50)  # warm: the template's compilation, the tokenizer's caches
    runs: list[dict[str, Any]] = []
    for _ in range(args.runs):
        runs.append({**per_request(tokens, system, args.calls), "event_us_per_block": per_event()})
        print(runs[-1], flush=True)
    result = {key: {"median": statistics.median(r[key] for r in runs), "min": min(r[key] for r in runs),
                    "max": max(r[key] for r in runs)} for key in runs[0]}
    when, command = date.today().isoformat(), command_line("kv_lookup_cost.py", sys.argv[1:])
    write_result(Path(args.out), "kv_lookup_cost", {"date": when, "machine": machine.machine(), "command": command,
                                                    "args": vars(args)}, {"summary": result, "runs": runs})

    def cell(key: str, digits: int = 0) -> str:
        value = result[key]
        return f"{value['median']:.{digits}f} [{value['min']:.{digits}f}-{value['max']:.{digits}f}]"

    table = "\n".join([
        f"Command: `{command.strip()}`; run of {when} on {machine.machine()}. A chat of "
        f"{result['tokens']['median']:.0f} tokens ({result['chars']['median']:.0f} characters rendered) with the tiny "
        f"model's tokenizer, blocks of {BLOCK} tokens, an index of four replicas; medians of {args.runs} runs "
        f"[range], each the p50 of {args.calls} requests.", "",
        "| step | µs per request, p50 |", "|---|---|",
        f"| render the chat (chat template) | {cell('render_p50_us')} |",
        f"| walk: system prompt held, new question | {cell('walk_held_p50_us')} |",
        f"| render + walk (p99) | {cell('total_p50_us')} ({cell('total_p99_us')}) |",
        f"| walk: prompt held nowhere | {cell('walk_cold_p50_us')} |",
        f"| without the walk: tokenize the whole prompt, key and look it up | {cell('whole_p50_us')} |", "",
        f"Applying the engines' events: **{cell('event_us_per_block', 2)} µs** of CPU per block stored and removed.",
        "", "Result file: `docs/kv_lookup_cost.json`."])
    write_block(Path(args.out), "kv_lookup_cost", table)
    print(table)


if __name__ == "__main__":
    main()
