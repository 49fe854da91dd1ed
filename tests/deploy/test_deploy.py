"""The files in deploy/ parse, point at each other and at prefixgate's real endpoints, and the
dashboard queries only metrics that exist (vLLM's names are checked against the real engine in
tests/integration/test_engine.py)."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from proxy.config import load as config_module
from proxy.config.load import load_config
from tests.support.configs import pool
from tests.support.dashboard import DEPLOY, dashboard_metrics
from tests.support.fake_server import FakeServer
from tests.support.metrics_text import exposed_names


def _yaml_documents(path: Path) -> list:
    return list(yaml.safe_load_all(path.read_text()))


def test_every_prefixgate_metric_the_dashboard_queries_exists(fake: FakeServer,
                                                              start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url, max_in_flight=2)]})
    body = {"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10).status_code == 200
    names = exposed_names(httpx.get(proxy + "/metrics").text)
    wanted = dashboard_metrics("prefixgate_")
    assert len(wanted) >= 12
    assert wanted <= names, sorted(wanted - names)
    # The metric names the docs give are checked with their other names in tests/docs/test_doc_names.py.


def test_the_dashboard_has_the_panels_operators_look_at() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "prefixgate-dashboard.json").read_text())
    titles = " | ".join(panel["title"] for panel in dashboard["panels"])
    for needed in ("TTFT", "Tokens/s", "Running and waiting", "KV-cache", "Queue", "Rejections", "Preemptions",
                   "hit rate"):
        assert needed in titles, needed
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_compose_runs_the_whole_stack_from_files_that_exist() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"vllm-short", "vllm-long", "qdrant", "redis", "prefixgate", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).is_file(), (name, source)
    for name in ("vllm-short", "vllm-long"):
        flags = services[name]["command"]
        for flag in ("--enable-prefix-caching", "--enable-chunked-prefill", "--max-num-batched-tokens 8192",
                     "--max-num-seqs", "--max-model-len", "--gpu-memory-utilization"):
            assert flag in flags, (name, flag)
    assert (DEPLOY.parent / services["prefixgate"]["build"]["dockerfile"]).is_file()
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {target.split(":")[0] for job in prometheus["scrape_configs"] for group in job["static_configs"]
               for target in group["targets"]}
    assert targets <= set(services) and {"prefixgate", "vllm-short", "vllm-long"} <= targets


def test_the_gateway_configs_shipped_in_deploy_load(tmp_path: Path) -> None:
    env = {"PREFIXGATE_KEY_SEARCH_APP": "sk-deploy-test-key", "PREFIXGATE_KEY_AGENTS": "sk-deploy-test-key-2",
           "PREFIXGATE_ADMIN_KEY": "sk-deploy-admin-key"}
    configmap = next(doc for doc in _yaml_documents(DEPLOY / "k8s" / "configmap.yaml") if doc["kind"] == "ConfigMap")
    inline = tmp_path / "configmap.yaml"
    inline.write_text(configmap["data"]["prefixgate.yaml"])
    for path in (DEPLOY / "prefixgate.compose.yaml", DEPLOY / "prefixgate.example.yaml", inline):
        config = load_config(path, env=env)
        assert config.pools, path
    compose = load_config(DEPLOY / "prefixgate.compose.yaml", env=env)
    assert [p.name for p in compose.pools] == ["short", "long"] and compose.pools[0].overflow_to == "long"


def test_kubernetes_manifests_run_prefixgate_as_gateway_and_as_sidecar() -> None:
    gateway = _yaml_documents(DEPLOY / "k8s" / "gateway.yaml")
    assert sorted(doc["kind"] for doc in gateway) == ["Deployment", "Service"]
    sidecar = next(doc for doc in _yaml_documents(DEPLOY / "k8s" / "sidecar.yaml") if doc["kind"] == "Deployment")
    containers = sidecar["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["app", "prefixgate"]
    app_env = {e["name"]: e.get("value") for e in containers[0]["env"]}
    assert app_env["OPENAI_BASE_URL"] == "http://127.0.0.1:8080/v1"
    for doc in (gateway[0], sidecar):
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "prefixgate":  # probes: test_probes_and_healthchecks_answer_...
                assert container["volumeMounts"][0]["mountPath"] == "/etc/prefixgate"


# ---- every prefixgate container, as its manifest starts it ----

@dataclass
class Container:
    """One prefixgate container of the deploy files: where it is, its config file and its environment."""

    where: str
    config: Path
    env: dict[str, str]  # secrets filled in with stand-ins; the manifest's own values as they are
    spec: dict[str, Any]


def _stand_in(name: str) -> str:
    return f"stand-in-{name.lower()}-0123456789"


def _compose_environment(environment: dict[str, str]) -> dict[str, str]:
    """The values docker compose would pass: ``${VAR:?...}`` from the user's .env, here a stand-in."""
    return {name: _stand_in(name) if re.fullmatch(r"\$\{\w+:\?.*\}", value) else value
            for name, value in environment.items()}


def prefixgate_containers(tmp_path: Path) -> list[Container]:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]["prefixgate"]
    mounted = {target: source for source, target, *_ in (v.split(":") for v in compose["volumes"])}
    found = [Container("compose", DEPLOY / mounted["/etc/prefixgate/prefixgate.yaml"],
                       _compose_environment(compose["environment"]), compose)]
    configmap = next(doc for doc in _yaml_documents(DEPLOY / "k8s" / "configmap.yaml") if doc["kind"] == "ConfigMap")
    inline = tmp_path / "configmap.yaml"
    inline.write_text(configmap["data"]["prefixgate.yaml"])
    for manifest in ("gateway.yaml", "sidecar.yaml"):
        deployment = next(doc for doc in _yaml_documents(DEPLOY / "k8s" / manifest) if doc["kind"] == "Deployment")
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            if container["image"].startswith("prefixgate"):
                env = {e["name"]: e["value"] if "value" in e else _stand_in(e["name"]) for e in container["env"]}
                found.append(Container(f"k8s/{manifest}", inline, env, {**container, "pod": deployment}))
    assert [c.where for c in found] == ["compose", "k8s/gateway.yaml", "k8s/sidecar.yaml"]
    return found


def test_each_container_starts_safe_with_the_config_and_environment_its_manifest_gives_it(tmp_path: Path) -> None:
    """What `prefixgate serve` would load in each container: keys on, an admin key, a shared cache-salt
    secret (so replicas agree and nothing is generated per pod), and the sidecar on loopback only."""
    for container in prefixgate_containers(tmp_path):
        config = load_config(container.config, env=container.env)
        assert config.resolved_keys and config.resolved_admin_key, container.where  # never open mode
        assert config.resolved_salt_secret == _stand_in("PREFIXGATE_CACHE_SALT_SECRET"), container.where
        expected_host = "127.0.0.1" if container.where == "k8s/sidecar.yaml" else "0.0.0.0"
        assert config.server.host == expected_host, container.where
        # every environment variable the manifest sets is one prefixgate reads
        read = {value for name, value in vars(config_module).items() if name.startswith("ENV_")}
        read |= {key.key_env for key in config.auth.keys} | {config.auth.admin_key_env}
        assert set(container.env) <= read, (container.where, sorted(set(container.env) - read))
    compose = prefixgate_containers(tmp_path)[0].spec
    assert all(port.startswith("127.0.0.1:") for port in compose["ports"])  # published on the host's loopback


def test_grace_periods_leave_room_to_drain(tmp_path: Path) -> None:
    for container in prefixgate_containers(tmp_path):
        drain = load_config(container.config, env=container.env).server.drain_timeout_s
        if container.where == "compose":
            grace = float(container.spec["stop_grace_period"].removesuffix("s"))
            pre_stop = 0.0
        else:
            grace = container.spec["pod"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            command = container.spec.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            pre_stop = float(command[1]) if command[:1] == ["sleep"] else 0.0
        assert grace >= pre_stop + drain + 5, (container.where, grace, pre_stop, drain)


def test_memory_limits_fit_the_measured_rss_with_retrieval_on(tmp_path: Path) -> None:
    """The soak (tests/bench/soak.py, retrieval with MiniLM and Qdrant on) measured the gateway's peak
    RSS; each container may use a quarter more before it is killed."""
    peak_mb = json.loads((DEPLOY.parent / "docs" / "soak.json").read_text())["results"]["growth"]["peak_rss_mb"]
    units = {"Mi": 2**20, "Gi": 2**30, "M": 10**6, "G": 10**9}
    for container in prefixgate_containers(tmp_path):
        limits = (container.spec["deploy"]["resources"]["limits"] if container.where == "compose"
                  else container.spec["resources"]["limits"])
        number, unit = re.fullmatch(r"(\d+)(\D+)", limits["memory"]).groups()  # type: ignore[union-attr]
        assert int(number) * units[unit] >= 1.25 * peak_mb * 2**20, (container.where, limits, peak_mb)


def test_probes_and_healthchecks_answer_without_credentials_on_a_keyed_gateway(
        fake: FakeServer, start_proxy: Callable[..., str], tmp_path: Path) -> None:
    """Every probe path in the manifests is a real route that answers 200 to a probe (no key), with the
    admin key set."""
    urls = []
    for container in prefixgate_containers(tmp_path):
        checks = [container.spec.get("healthcheck", {}).get("test", []),
                  *(container.spec.get(probe, {}) for probe in ("readinessProbe", "livenessProbe"))]
        for check in checks:
            if isinstance(check, dict) and "httpGet" in check:
                urls.append(check["httpGet"]["path"])
            elif check:
                command = check if isinstance(check, list) else check["exec"]["command"]
                urls += [re.sub(r"^http://127\.0\.0\.1:8080", "", url)
                         for url in re.findall(r"http://127\.0\.0\.1:8080/\w+", " ".join(command))]
    assert sorted(set(urls)) == ["/health", "/ready"] and len(urls) == 5, urls
    gateway = start_proxy({"pools": [pool("p", fake.base_url)],
                           "auth": {"keys": [{"tenant": "a", "key": "sk-probe-test-1"}],
                                    "admin_key": "sk-probe-admin-1"}})
    for path in urls:
        assert httpx.get(gateway + path).status_code == 200, path


def test_the_compose_image_has_what_its_config_needs_and_qdrant_is_used(tmp_path: Path) -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    extras = set(compose["prefixgate"]["build"]["args"]["EXTRAS"].split(","))
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "ARG EXTRAS" in dockerfile and "${EXTRAS:+[$EXTRAS]}" in dockerfile
    declared = set(tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert extras <= declared
    container = prefixgate_containers(tmp_path)[0]
    config = load_config(container.config, env=container.env)
    retrieving = [name for name, tenant in config.tenants.items() if tenant.retrieval is not None]
    assert retrieving and set(retrieving) <= set(config.resolved_keys.values())  # a tenant a key can name
    assert config.retrieval.qdrant_url is not None and config.retrieval.qdrant_url.startswith("http://qdrant:")
    if config.retrieval.embeddings_url is None:
        assert "retrieval" in extras  # MiniLM in-process
    if any(p.kind == "litellm" for p in config.pools):
        assert "providers" in extras
    assert compose["prefixgate"]["command"][0] == "serve" and "ENTRYPOINT [\"prefixgate\"]" in dockerfile
