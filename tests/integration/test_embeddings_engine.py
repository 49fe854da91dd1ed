"""/v1/embeddings through prefixgate to a real vLLM pooling engine (the tiny model run as an embedder),
configured the way a user points prefixgate at an embeddings pool: the `embeddings:` upstream."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import openai
import pytest

from proxy.app import create_app
from proxy.engine.process import LocalEngine, free_port
from proxy.engine.tiny_model import ensure_tiny_model
from tests.support.configs import make_config
from tests.support.embedded import Embedded, running
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.engine

EMBED_MODEL = "prefixgate-tiny-embed"


@pytest.fixture(scope="module")
def embedding_engine(embedded: Embedded) -> Iterator[LocalEngine]:
    engine = LocalEngine(
        ensure_tiny_model(embedded.data_dir), served_model_name=EMBED_MODEL, port=free_port(),
        log_path=embedded.data_dir / "embed-engine.log", extra_args=["--runner", "pooling", "--convert", "embed"],
    )
    with running(engine):
        yield engine


@pytest.fixture(scope="module")
def gateway(embedding_engine: LocalEngine) -> Iterator[str]:
    config = make_config({"embeddings": {"replicas": [embedding_engine.base_url], "models": [EMBED_MODEL]}})
    with serve_in_thread(create_app(config)) as url:
        yield url


def test_sdk_embeddings_match_the_engine(embedding_engine: LocalEngine, gateway: str) -> None:
    texts = ["prefix caching saves prefill", "a second, different sentence"]
    with openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0) as sdk:
        proxied = sdk.embeddings.create(model=EMBED_MODEL, input=texts)
    direct = httpx.post(embedding_engine.base_url + "/embeddings", json={"model": EMBED_MODEL, "input": texts},
                        timeout=60).json()
    assert [item.index for item in proxied.data] == [0, 1]
    assert proxied.usage.prompt_tokens == direct["usage"]["prompt_tokens"] > 0
    for mine, theirs in zip(proxied.data, direct["data"], strict=True):
        assert len(mine.embedding) == len(theirs["embedding"]) > 0
        assert mine.embedding == pytest.approx(theirs["embedding"], abs=1e-5)
        assert math.isclose(math.fsum(x * x for x in mine.embedding), 1.0, rel_tol=1e-3)  # vLLM normalizes


def test_bad_embeddings_input_is_a_400_naming_the_field(gateway: str) -> None:
    answer = httpx.post(gateway + "/v1/embeddings", json={"model": EMBED_MODEL, "input": 42})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "input"


def test_unknown_embeddings_model_is_404(gateway: str) -> None:
    answer = httpx.post(gateway + "/v1/embeddings", json={"model": "no-such-embedder", "input": "x"})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "model_not_found"
