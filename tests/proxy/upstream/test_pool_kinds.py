"""The kinds of pool: each ``kind`` the config accepts is one class in ``POOL_KINDS`` that names its config model,
and a gateway builds each pool, in every worker, as the kind its config names."""

from __future__ import annotations

from typing import get_args

from proxy.config.load import config_from_dump, dump_config
from proxy.config.pools import PoolConfig, pool_kinds
from proxy.upstream.pools import POOL_KINDS, Upstreams
from tests.support.clock import FakeClock
from tests.support.configs import make_config, pool
from tests.support.mock_engine import chat_completion
from tests.support.mock_transport import MockUpstreams

HOSTED = {"name": "hosted", "kind": "litellm", "models": ["big"], "litellm_model": "openai/big", "api_key": "sk-p"}


def test_every_kind_the_config_accepts_has_its_class_and_every_class_its_kind() -> None:
    union, _ = get_args(PoolConfig)
    tags = {get_args(member)[1].tag for member in get_args(union)}
    assert tags == set(pool_kinds()) == set(POOL_KINDS)
    for kind, model in pool_kinds().items():
        assert get_args(model.model_fields["kind"].annotation) == (kind,)  # the tag is the model's own kind
        assert POOL_KINDS[kind].config_model is model


def test_each_pool_is_built_as_its_kind_in_every_worker() -> None:
    """A pool that names no kind is an ``openai`` pool; the config each worker reads back from the dump keeps
    every pool's kind and fields."""
    config = make_config({"pools": [pool("local", "http://a:8000/v1", models=["m"]), HOSTED]})
    again = config_from_dump(dump_config(config))
    assert again.pools == config.pools
    upstreams = Upstreams(again, MockUpstreams(lambda url, body: chat_completion()), FakeClock())
    local, hosted = upstreams.pools
    assert type(local) is POOL_KINDS["openai"] and [r.base_url for r in local.replicas] == ["http://a:8000/v1"]
    assert type(hosted) is POOL_KINDS["litellm"] and hosted.pick() is None and not hasattr(hosted, "replicas")
    assert hosted.serves("big") and not hosted.catch_all
