"""What vLLM's automatic prefix cache would reuse for a sequence of prompts: the offline estimate.

vLLM caches KV in fixed blocks of tokens and finds a block by a hash chained from the first block,
so a request reuses exactly its leading full blocks that some earlier prompt had too; only full
blocks are kept, and the last prompt token is always computed. ``simulate`` applies that rule with
an unbounded cache (an upper bound: a busy engine evicts). ``first_divergence`` finds where a prompt
stops matching every earlier one, to name the span that broke it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.prompt.stable_prefix import common_prefix


def render_chat(body: dict[str, Any]) -> tuple[str, int]:
    """A generic chat rendering (tools first, then role-tagged messages) and where the last user turn starts.

    Real chat templates differ in their markers, not in this order, which is what prefix reuse
    depends on.
    """
    parts = []
    length = 0
    last_user = 0
    if body.get("tools"):
        parts.append("<|tools|>\n" + "\n".join(json.dumps(tool, ensure_ascii=False) for tool in body["tools"]) + "\n")
        length += len(parts[-1])
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if message.get("role") == "user":
            last_user = length
        parts.append(f"<|{message.get('role')}|>\n{content or ''}\n")
        length += len(parts[-1])
    return "".join(parts), last_user


@dataclass(slots=True)
class CacheSimulation:
    """Feed prompts (token ids) in arrival order; read hit and total token counts."""

    block_size: int
    prompt_tokens: int = 0
    hit_tokens: int = 0
    _blocks: set[int] = field(default_factory=set)

    def add(self, tokens: Sequence[int]) -> int:
        """Record one prompt; return how many of its tokens the cache would have served."""
        size = self.block_size
        parent = 0
        hits = 0
        reusable = (len(tokens) - 1) // size  # the last token is always computed
        for index in range(len(tokens) // size):
            parent = hash((parent, tuple(tokens[index * size:(index + 1) * size])))
            if index < reusable and hits == index * size and parent in self._blocks:
                hits += size
            self._blocks.add(parent)
        self.prompt_tokens += len(tokens)
        self.hit_tokens += hits
        return hits

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(slots=True)
class PrefixIndex:
    """Earlier prompts in sorted order: the longest prefix a text shares with any of them is with a neighbour."""

    _texts: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self._texts)

    def longest_shared(self, text: str) -> int:
        """Characters of ``text`` that some earlier text starts with too (0 for the first)."""
        position = bisect.bisect_left(self._texts, text)
        best = 0
        for neighbour in self._texts[max(position - 1, 0):position + 1]:
            best = max(best, common_prefix(neighbour, text))
        return best

    def add(self, text: str) -> None:
        bisect.insort(self._texts, text)


def top_counts(items: Iterable[tuple[str, str]], limit: int = 10) -> list[tuple[str, int, str]]:
    """(kind, count, first example) for the most frequent kinds."""
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    for kind, example in items:
        counts[kind] = counts.get(kind, 0) + 1
        examples.setdefault(kind, example)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [(kind, count, examples[kind]) for kind, count in ranked]
