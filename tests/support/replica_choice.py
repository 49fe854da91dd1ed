"""Which replica got a request: long system prompts that each pick a home replica, a request with one of
them, and the fake replica that received it (read from the fakes' own records, not from the gateway)."""

from __future__ import annotations

import httpx

from tests.support.fake_server import FakeServer

PROMPTS = [f"You are assistant number {n} of ACME. " + "Follow the house rules and cite sources. " * 30
           for n in range(8)]


def ask(proxy: str, system: str, question: str) -> None:
    body = {"model": "fake-model", "max_tokens": 2, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": question}]}
    response = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text


def served_by(replicas: list[FakeServer], question: str) -> int:
    """Index of the replica that received the request whose user message is ``question``."""
    hits = [index for index, fake in enumerate(replicas)
            if any(b["messages"][-1]["content"] == question for b in fake.app.stats.recent_bodies)]
    assert len(hits) == 1, hits
    return hits[0]
