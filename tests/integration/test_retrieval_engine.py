"""Retrieval end to end with every real part: MiniLM, Qdrant local mode, prefixgate and the vLLM engine.

The engine reports back the prompt it rendered (``prompt_logprobs``, one decoded token each): it must
hold the passages we expect for the question, in the template, right before the question and after
the system message. Its usage must also equal what /tokenize counts for that prompt, so no passage
is missing or added.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from policies.retrieval.evidence import EvidencePolicy, render_evidence, select_evidence
from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.embeddings import LocalMiniLM
from proxy.retrieval.ingestion import ingest
from proxy.retrieval.retriever import passage_budget_tokens
from tests.support.configs import pool
from tests.support.corpus import write_corpus
from tests.support.embedded import Embedded

pytestmark = pytest.mark.engine

SYSTEM = "You are Northwind's assistant. Answer from the context."
QUESTIONS = {"How long do customers have to send an item back?": "returns.md",
             "Who runs technology at Northwind?": "board.md"}


def test_the_engine_receives_the_selected_passages_before_the_question(
    embedded: Embedded, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    root = write_corpus(tmp_path / "northwind")
    settings = {"collection": "docs", "candidates": 20, "top_n": 3, "budget_tokens": 600}

    async def load_and_expect() -> dict[str, str]:
        embedder = LocalMiniLM()
        store = EdgeStore.open(tmp_path / "data" / "qdrant", dimensions=embedder.dimensions)
        try:
            await ingest([str(root)], tenant="default", collection="docs", embedder=embedder, store=store,
                         chunk_tokens=200, chunk_overlap=32, progress=False)
            policy = EvidencePolicy(top_n=3, budget_tokens=600)
            expected = {}
            for question in QUESTIONS:
                hits = await store.search("docs", "default", (await embedder.embed([question]))[0], 20)
                expected[question] = render_evidence(select_evidence(hits, policy, passage_budget_tokens))
            return expected
        finally:
            await store.aclose()
            await embedder.aclose()

    expected = asyncio.run(load_and_expect())
    gateway = start_proxy({
        "pools": [pool("engine", embedded.engine + "/v1", models=[embedded.model])],
        "data_dir": str(tmp_path / "data"),
        "tenants": {"default": {"retrieval": settings}},  # open mode: the tenant is "default"
    })
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0, timeout=120)
    for question, document in QUESTIONS.items():
        assert f"] {document} (chunk 0)" in expected[question]  # the answering document is among the passages
        answer = client.chat.completions.with_raw_response.create(
            model=embedded.model, max_tokens=2, temperature=0, extra_body={"prompt_logprobs": 0},
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        )
        assert answer.headers["x-prefixgate-passages"] == "3"
        rendered = "".join(next(iter(entry.values()))["decoded_token"]
                           for entry in answer.http_response.json()["prompt_logprobs"] if entry)
        assert rendered.index(SYSTEM) < rendered.index(expected[question] + "\n\n" + question)
        completion = answer.parse()
        assert completion.choices[0].message is not None
        prompt = [{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": expected[question] + "\n\n" + question}]
        count = httpx.post(embedded.engine + "/tokenize", json={"model": embedded.model, "messages": prompt},
                           timeout=30).json()["count"]
        bare = httpx.post(embedded.engine + "/tokenize", timeout=30, json={"model": embedded.model, "messages": [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}).json()["count"]
        assert completion.usage is not None
        assert completion.usage.prompt_tokens == count > bare + 50
