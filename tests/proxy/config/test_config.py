from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.load import ConfigError, build_config, config_from_dump, dump_config, load_config, with_engine_pool


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prefixgate.yaml"
    path.write_text(text)
    return path


def test_environment_alone_configures_the_sidecar() -> None:
    env = {"PREFIXGATE_UPSTREAM": "http://127.0.0.1:8000/v1, http://127.0.0.1:8001/v1/", "PREFIXGATE_PORT": "9090"}
    config = load_config(None, env=env)
    assert config.server.port == 9090
    assert [p.name for p in config.pools] == ["default"]
    assert config.pools[0].replicas == ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"]
    assert not config.wants_engine


def test_no_upstream_means_embedded_engine() -> None:
    assert load_config(None, env={}).wants_engine


def test_file_with_several_pools_and_keys(tmp_path: Path) -> None:
    path = write(tmp_path, """
server: {port: 8081, max_body_bytes: 2048}
auth:
  keys:
    - {tenant: acme, key: sk-acme-123456}
    - {tenant: beta, key_env: BETA_KEY}
pools:
  - name: short
    replicas: [http://10.0.0.1:8000/v1, http://10.0.0.2:8000/v1]
    models: [llama]
    timeouts: {connect: 1, first_byte: 30, total: 60}
  - name: long
    replicas: [http://10.0.0.3:8000/v1]
""")
    config = load_config(path, env={"BETA_KEY": "sk-beta-abcdef"})
    assert [p.name for p in config.pools] == ["short", "long"]
    assert config.pools[0].timeouts.first_byte == 30
    assert config.resolved_keys == {"sk-acme-123456": "acme", "sk-beta-abcdef": "beta"}
    assert "sk-acme" not in repr(config)  # keys stay out of reprs and logs


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("pools:\n  - name: a\n    replicas: []\n", ["pools[0]", "needs replicas"]),
        ("pools:\n  - name: a\n    replicas: [localhost:8000]\n", ["pools[0].replicas", "http(s) base URL"]),
        ("server: {port: 99999}\n", ["server.port", "65535"]),
        ("server: {prot: 1}\n", ["server.prot", "Extra inputs"]),
        ("pools:\n  - {name: a, replicas: ['http://x/v1']}\n  - {name: a, replicas: ['http://y/v1']}\n",
         ["pools", "unique"]),
        ("auth:\n  keys:\n    - {tenant: t}\n", ["auth.keys[0]", "exactly one"]),
        ("pools:\n  - {name: a, replicas: ['http://x/v1', 'http://y/v1'], balance: kv_events}\n",
         ["pools[0]", "kv_events.tokenizer", "the model's folder"]),
        ("pools:\n  - {name: a, replicas: ['http://x/v1', 'http://y/v1'], balance: kv_events,\n"
         "     kv_events: {endpoints: ['tcp://x:5557'], tokenizer: /nonexistent}}\n",
         ["pools[0].kv_events.tokenizer", "no model folder at /nonexistent"]),
        ("pools:\n  - name: a\n    replicas: ['http://x/v1']\n    timeouts: {total: -1}\n",
         ["pools[0].timeouts.total", "greater than 0"]),
        ("- just\n- a list\n", ["top level must be a mapping"]),
        ("pools: [\n", ["not valid YAML"]),
        ("prompt:\n  templates:\n    - {name: t, text: 'Hi {0}'}\n",
         ["prompt.templates[0]", "template 't'", "plain {name} variable"]),
        ("tenants:\n  acme: {prompt: {cache_salt: public}}\n", ["tenants.acme.prompt.cache_salt", "isolate"]),
        ("prompt:\n  patterns: [{name: p, regex: '(x'}]\n", ["prompt.patterns[0].regex", "not a valid regular"]),
        ("prompt:\n  actions: {trace: strip}\n", ["prompt.actions", "no span is of kind trace", "kinds: clock"]),
        ("prompt:\n  actions: {id: drop}\n", ["prompt.actions.id", "'relocate', 'strip' or 'keep'"]),
        ("tenants:\n  acme: {prompt: {actions: {ticket: strip}}}\n",
         ["tenants.acme.prompt.actions", "no span is of kind ticket"]),
        ("redis: {url: 'localhost:6379'}\n", ["redis.url", "redis:// URL"]),
        ("redis: {url: 'redis://h:6379/0', timeout_ms: 0}\n", ["redis.timeout_ms", "greater than 0"]),
    ],
)
def test_errors_name_file_and_field(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_missing_key_env_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "auth:\n  keys:\n    - {tenant: t, key_env: NOPE_KEY}\n")
    with pytest.raises(ConfigError, match=r"auth\.keys\[0\]\.key_env: environment variable NOPE_KEY is not set"):
        load_config(path, env={})


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_config(tmp_path / "nope.yaml", env={})


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = write(tmp_path, "server: {port: 8081}\npools:\n  - {name: a, replicas: ['http://x/v1']}\n")
    config = load_config(path, env={"PREFIXGATE_PORT": "7000", "PREFIXGATE_UPSTREAM": "http://y/v1"})
    assert config.server.port == 7000 and config.pools[0].replicas == ["http://y/v1"]


def test_tenant_prompt_fields_lay_over_the_top_level_ones() -> None:
    config = build_config({"prompt": {"scope": "history", "note": "system_message"},
                           "tenants": {"acme": {"prompt": {"cache_salt": "share", "note": "last_user"}}}}, env={})
    acme, other = config.tenant_prompt("acme"), config.tenant_prompt("beta")
    assert (acme.scope, acme.note, acme.cache_salt) == ("history", "last_user", "share")
    assert (other.scope, other.note, other.cache_salt) == ("history", "system_message", "isolate")


def test_a_tenant_action_may_name_a_top_level_pattern() -> None:
    config = build_config({"prompt": {"patterns": [{"name": "ticket", "regex": r"T-\d+"}]},
                           "tenants": {"acme": {"prompt": {"actions": {"ticket": "strip", "id": "keep"}}}}}, env={})
    assert config.tenant_prompt("acme").actions == {"ticket": "strip", "id": "keep"}
    assert config.tenant_prompt("beta").actions == {}


def test_dump_round_trip_keeps_keys_for_workers() -> None:
    config = load_config(None, env={"PREFIXGATE_UPSTREAM": "http://y/v1"})
    config = config.model_copy(update={"resolved_keys": {"sk-123456789": "t"}})
    again = config_from_dump(dump_config(config))
    assert again == config and again.resolved_keys == {"sk-123456789": "t"}


def test_tenants_no_key_can_name_are_reported() -> None:
    """The README's retrieval example in open mode: settings for acme that no request would ever get."""
    retrieval = {"retrieval": {"collection": "docs"}}
    open_mode = build_config({"tenants": {"acme": retrieval, "default": retrieval}}, env={})
    assert open_mode.unreachable_tenants == ["acme"]
    keyed = build_config({"auth": {"keys": [{"tenant": "acme", "key": "sk-acme-key-1"}]},
                          "tenants": {"acme": retrieval, "globex": retrieval, "default": retrieval}}, env={})
    assert keyed.unreachable_tenants == ["default", "globex"]


def test_kv_events_name_one_socket_per_replica_or_none(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tokenizer_config.json").write_text("{}")
    path = write(tmp_path, f"""
pools:
  - name: a
    replicas: [http://x/v1, http://y/v1]
    balance: kv_events
    kv_events: {{tokenizer: {tmp_path / "model"}, endpoints: [tcp://x:5557]}}
""")
    with pytest.raises(ConfigError) as error:
        load_config(path, env={})
    assert "pools[0]" in str(error.value) and "1 sockets for 2 replicas" in str(error.value)


def test_the_embedded_tiny_model_parses_tool_calls_and_writes_compact_json_unless_told_not_to() -> None:
    engine = load_config(None, env={}).engine
    assert engine.vllm_args()[:3] == ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]
    assert '"disable_any_whitespace": true' in engine.vllm_args()[4]
    plain = build_config({"engine": {"tool_call_parser": "none", "compact_json": False, "extra_args": ["--seed", "1"]}},
                         env={}, source="test")
    assert plain.engine.vllm_args() == ["--seed", "1"]


def test_the_embedded_pool_knows_its_context_counts_with_its_model_and_caps_output_by_default(tmp_path: Path) -> None:
    """An agent's ~45,000-token prompt and 32,000-token answer fit the tiny model's context; a request that names
    no cap (Codex) gets 1,024 tokens rather than the rest of the context; its prompt is counted with the model's own
    tokenizer, which the estimate undercounts twice over."""
    (tmp_path / "tokenizer.json").write_text("{}")
    config = with_engine_pool(load_config(None, env={}), "http://127.0.0.1:9/v1", "tiny", tmp_path)
    [pool] = config.pools
    assert config.engine.max_model_len == pool.max_model_len == 65_536
    assert pool.max_tokens_default == config.engine.default_max_tokens == 1024
    assert config.tokenizer == str(tmp_path / "tokenizer.json")
    own = tmp_path / "own.json"
    own.write_text("{}")
    told = build_config({"engine": {"default_max_tokens": None, "max_model_len": 8192}, "tokenizer": str(own)},
                        env={}, source="test")
    config = with_engine_pool(told, "http://127.0.0.1:9/v1", "tiny", tmp_path)
    assert (config.pools[0].max_tokens_default, config.pools[0].max_model_len) == (None, 8192)
    assert config.tokenizer == str(own)  # the operator's tokenizer stands


def test_a_model_of_ones_own_gets_only_the_parser_named_for_it(tmp_path: Path) -> None:
    own = build_config({"engine": {"model_dir": str(tmp_path)}}, env={}, source="test").engine
    assert own.vllm_args() == []
    named = build_config({"engine": {"model_dir": str(tmp_path), "tool_call_parser": "hermes"}}, env={},
                         source="test").engine
    assert named.vllm_args() == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def test_continue_long_is_refused_where_a_litellm_pool_would_cut_or_continue_the_answer() -> None:
    """A litellm pool neither reports the cut nor writes on from a partial answer: a layout that puts one on
    either side of the seam is refused at load, naming both pools; one behind the long pool (its overflow) is not."""
    short = {"name": "short", "replicas": ["http://s/v1"], "models": ["m"], "output": "short", "continue_long": True}
    hosted = {"name": "hosted", "kind": "litellm", "models": ["m"], "litellm_model": "openai/m"}
    long = {"name": "long", "replicas": ["http://l/v1"], "models": ["m"], "output": "long"}
    with pytest.raises(ConfigError, match=r"pool 'short' continues its cut answers to m in pool 'hosted', which is "
                                          r"of kind litellm"):
        build_config({"pools": [short, hosted, long]}, env={}, source="test")
    with pytest.raises(ConfigError, match=r"pool 'short' continues its cut answers to m in pool 'hosted'"):
        build_config({"pools": [{**short, "models": []}, hosted]}, env={}, source="test")  # any model: m too
    litellm_short = {**hosted, "name": "short", "output": "short", "continue_long": True}
    with pytest.raises(ConfigError, match=r"pool 'short': continue_long needs a pool of kind openai"):
        build_config({"pools": [litellm_short, long]}, env={}, source="test")
    config = build_config({"pools": [short, {**long, "overflow_to": "hosted"}, hosted]}, env={}, source="test")
    assert [pool.name for pool in config.pools] == ["short", "long", "hosted"]
    assert build_config({"pools": [{**short, "models": ["other"]}, hosted, long]}, env={}, source="test")
