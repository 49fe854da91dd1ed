"""An output cap that fits the engine's context, through the gateway in memory: a chat or Responses request that
asks for more output than its prompt leaves of the pool's context (configured, or as the engines' `/v1/models`
says) is sent with the cap lowered to what fits and the answer says so (`x-prefixgate-output-clamped`); one that
fits is sent as it came. The embedded pool counts with its model's tokenizer and caps what names no cap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient
from tokenizers import Tokenizer, models, pre_tokenizers

from policies.admission.context_fit import output_room
from proxy.admission.token_count import estimate_prompt_tokens
from proxy.app import create_app
from proxy.config.load import build_config, with_engine_pool
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_engine import MockEngine
from tests.support.mock_transport import MockReply, MockUpstreams

A = "http://a:8000/v1"
CONTEXT = 4096
HEADER = "x-prefixgate-output-clamped"
QUIET = {"health": {"interval": 0}, "engine_metrics": {"interval": 0}}
USER_TEXT = "a" * 2000  # 2,000 tokens of the byte tokenizer; with "<user>", 2,006
FITS = CONTEXT - 2006 - 2006 // 50 - 64  # the room the exact count leaves: 1,986


def engine(url: str, body: bytes) -> MockReply:
    """vLLM in memory: its model card with its context, chat answers, a Responses answer."""
    if url.endswith("/models"):
        return MockReply.json({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": CONTEXT}]})
    if url.endswith("/responses"):
        usage = {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}
        return MockReply.json({"id": "resp_1", "object": "response", "model": "m", "status": "completed",
                               "output": [], "usage": usage})
    return MockEngine()(url, body)


def byte_tokenizer(folder: Path) -> Path:
    """A tokenizer.json whose tokens are the text's bytes, one each: an exact count a test can write down."""
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())},
                                     merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


@pytest.fixture
def upstreams() -> MockUpstreams:
    return MockUpstreams(engine)


def _sent(upstreams: MockUpstreams) -> dict[str, Any]:
    return orjson.loads(upstreams.posts()[-1].body)


def _chat(client: TestClient, **fields: Any) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": "m", "messages": [
        {"role": "user", "content": USER_TEXT}], **fields})


def _respond(client: TestClient, text: str, **fields: Any) -> httpx.Response:
    return client.post("/v1/responses", json={"model": "m", "input": text, "store": False, **fields})


def test_a_chat_cap_above_what_the_pools_context_leaves_is_lowered_to_fit(upstreams: MockUpstreams,
                                                                          tmp_path: Path) -> None:
    config = {"pools": [pool("p", A, models=["m"], max_model_len=CONTEXT, **QUIET)],
              "tokenizer": str(byte_tokenizer(tmp_path))}
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        clamped = _chat(client, max_tokens=3000)
        assert clamped.status_code == 200, clamped.text
        assert _sent(upstreams)["max_tokens"] == FITS == int(clamped.headers[HEADER])
        both = _chat(client, max_completion_tokens=32_000, max_tokens=32_000)  # as Claude Code's cap would
        assert (_sent(upstreams)["max_completion_tokens"], _sent(upstreams)["max_tokens"]) == (FITS, FITS)
        assert both.headers[HEADER] == str(FITS)
        fits = _chat(client, max_tokens=FITS)
        assert fits.status_code == 200 and HEADER not in fits.headers
        sent = upstreams.posts()[-1].body  # the body as it came, the cache salt spliced on
        assert sent.startswith(orjson.dumps({"model": "m", "messages": [
            {"role": "user", "content": USER_TEXT}], "max_tokens": FITS})[:-1] + b',"cache_salt":')
        assert HEADER not in _chat(client).headers and "max_tokens" not in _sent(upstreams)  # no cap: none


def test_a_responses_cap_is_lowered_to_what_the_engines_own_context_leaves(upstreams: MockUpstreams,
                                                                           tmp_path: Path) -> None:
    """The pool declares no models and no context: both come from its engines' `/v1/models`; the prompt is
    estimated, and the estimate's spare kept."""
    text = "word " * 1600
    room = output_room(CONTEXT, estimate_prompt_tokens(("<user>", text)), exact=False)
    assert room is not None and 0 < room < 3000
    with in_memory_gateway({"pools": [pool("p", A, **QUIET)]}, upstreams, FakeClock(), tmp_path) as client:
        clamped = _respond(client, text, max_output_tokens=32_000)
        assert clamped.status_code == 200, clamped.text
        assert upstreams.posts()[-1].url == A + "/responses"
        assert _sent(upstreams)["max_output_tokens"] == room == int(clamped.headers[HEADER])
        fits = _respond(client, text, max_output_tokens=room)
        assert fits.status_code == 200 and HEADER not in fits.headers
        assert _sent(upstreams)["max_output_tokens"] == room


@pytest.fixture
def embedded(upstreams: MockUpstreams, tmp_path: Path) -> Iterator[TestClient]:
    """The gateway `prefixgate serve` runs in front of its embedded engine, here on a 4,096-token context."""
    byte_tokenizer(tmp_path)
    config = build_config({"data_dir": str(tmp_path), "engine": {"max_model_len": CONTEXT}}, env={}, source="test")
    config = with_engine_pool(config, A, "m", tmp_path)
    with TestClient(create_app(config, transports=upstreams, clock=FakeClock())) as client:
        yield client


def test_the_embedded_pool_caps_what_names_no_cap_and_counts_with_its_models_tokenizer(
        embedded: TestClient, upstreams: MockUpstreams) -> None:
    """Codex names no cap: it gets 1,024 tokens, lowered where the prompt leaves less; a cap counted with the
    model's own tokenizer (2,006 tokens) fits where the estimate (503) would have let it through to a refusal."""
    answer = _respond(embedded, "Plan my day.")
    assert answer.status_code == 200 and _sent(upstreams)["max_output_tokens"] == 1024
    assert HEADER not in answer.headers
    assert _chat(embedded).status_code == 200 and _sent(upstreams)["max_tokens"] == 1024
    long = _respond(embedded, "a" * 3500)  # leaves 4,096 - 3,506 - 70 - 64 = 456
    assert _sent(upstreams)["max_output_tokens"] == 456 == int(long.headers[HEADER])
    asked = _chat(embedded, max_tokens=3000)
    assert _sent(upstreams)["max_tokens"] == FITS == int(asked.headers[HEADER])


def test_each_cap_lowered_is_counted_once_and_neither_a_cap_that_fits_nor_the_route_explainers(
        upstreams: MockUpstreams, tmp_path: Path) -> None:
    config = {"pools": [pool("p", A, models=["m"], max_model_len=CONTEXT, **QUIET)],
              "tokenizer": str(byte_tokenizer(tmp_path))}

    def clamped(client: TestClient) -> float:
        return sample_sum(client.get("/metrics").text, "prefixgate_output_clamped_total", pool="p")

    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        assert clamped(client) == 0
        explained = client.post("/admin/route/v1/chat/completions", json={
            "model": "m", "max_tokens": 3000, "messages": [{"role": "user", "content": USER_TEXT}]})
        assert explained.status_code == 200 and clamped(client) == 0  # the explainer counts nothing
        assert HEADER in _chat(client, max_tokens=3000).headers
        assert clamped(client) == 1
        assert HEADER not in _chat(client, max_tokens=FITS).headers
        assert clamped(client) == 1
