"""A stand-in embedder for the retrieval tests that need no model: it records what it was asked."""

from __future__ import annotations

import asyncio


class CountingEmbedder:
    """Answers each text with [len(text)] and records each call's texts.

    Made ``held``, every call stays in the "model" until the test calls ``release()``: for a test that
    needs a batch to be running while something else happens (texts arriving, a caller leaving), or,
    never released, for an embedder that is stuck."""

    dimensions = 1

    def __init__(self, fail: bool = False, *, held: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self._gate = asyncio.Event()
        if not held:
            self._gate.set()

    def release(self) -> None:
        """Let the held call, and every later one, answer."""
        self._gate.set()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await self._gate.wait()
        if self.fail:
            raise RuntimeError("model crashed")
        return [[float(len(text))] for text in texts]

    async def aclose(self) -> None:
        return None
