"""A stand-in embedder for the retrieval tests that need no model: it records what it was asked."""

from __future__ import annotations

import asyncio


class CountingEmbedder:
    """Answers each text with [len(text)] after a short pause, like a model's forward pass."""

    dimensions = 1

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(0.02)
        if self.fail:
            raise RuntimeError("model crashed")
        return [[float(len(text))] for text in texts]

    async def aclose(self) -> None:
        return None
