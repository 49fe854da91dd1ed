"""The files in deploy/ parse, point at each other and at prefixgate's real endpoints, and the
dashboard queries only metrics that exist (vLLM's names are checked against the real engine in
tests/integration/test_engine.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

from proxy.config import load_config
from tests.conftest import FakeServer, pool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\b(prefixgate_[a-z_]+|vllm:[a-z_:]+)")
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count")


def dashboard_metrics(prefix: str) -> set[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "prefixgate-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in exprs for name in METRIC.findall(expr) if name.startswith(prefix)}


def exposed_names(text: str) -> set[str]:
    """Every sample name a /metrics page has or would have once its labelled children exist."""
    families = re.findall(r"^# TYPE (\S+) \S+$", text, re.MULTILINE)
    return {family.removesuffix("_total") + suffix for family in families for suffix in SUFFIXES}


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
    # The docs name metrics too (tuning guide, configuration, architecture): none may be stale.
    documented = {name for path in [*(DEPLOY.parent / "docs").glob("*.md"), DEPLOY.parent / "README.md"]
                  for name in re.findall(r"prefixgate_[a-z_]+[a-z]\b", path.read_text())}
    assert len(documented) >= 20
    assert documented <= names, sorted(documented - names)


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
    env = {"PREFIXGATE_KEY_SEARCH_APP": "sk-deploy-test-key", "PREFIXGATE_KEY_AGENTS": "sk-deploy-test-key-2"}
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
            if container["name"] == "prefixgate":
                assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
                assert container["volumeMounts"][0]["mountPath"] == "/etc/prefixgate"
