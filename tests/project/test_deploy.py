"""The deployment files agree with the code (no Docker engine needed to check that)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from proxy.config import ServerSettings
from proxy.http.caller import Gatekeeper

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {f"OFFLOAD_{name.upper()}" for name in ServerSettings.model_fields}


def offload_vars(text: str) -> set[str]:
    return set(re.findall(r"\bOFFLOAD_[A-Z_]+\b", text))


def test_every_offload_variable_in_deploy_files_is_a_setting():
    for path in [
        ROOT / "docker-compose.yml",
        ROOT / "deploy" / "Dockerfile",
        *(ROOT / "deploy" / "k8s").glob("*.yaml"),
    ]:
        unknown = offload_vars(path.read_text()) - SETTINGS
        assert not unknown, f"{path.name}: {unknown}"


def test_dockerfile_runs_the_proxy_as_non_root_with_a_readiness_healthcheck():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["python", "-m", "proxy", "serve"]' in text
    assert re.search(r"^USER (?!root)\w+", text, re.M)
    assert "HEALTHCHECK" in text and "/readyz" in text


def test_compose_has_the_proxy_and_persistent_redis():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    proxy, redis = compose["services"]["proxy"], compose["services"]["redis"]
    assert proxy["environment"]["OFFLOAD_REDIS_URL"].startswith("redis://redis:")
    assert "--appendonly" in redis["command"] and "yes" in redis["command"]
    assert any(v.endswith(":/data") for v in redis["volumes"])


def test_kubernetes_manifests():
    docs = {}
    for path in (ROOT / "deploy" / "k8s").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            docs[doc["kind"]] = doc
    assert {"Deployment", "Service", "ConfigMap", "Secret", "HorizontalPodAutoscaler"} <= set(docs)
    spec = docs["Deployment"]["spec"]
    container = spec["template"]["spec"]["containers"][0]
    assert "replicas" not in spec and docs["HorizontalPodAutoscaler"]["spec"]["minReplicas"] > 1  # the HPA's
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]
    grace = int(docs["ConfigMap"]["data"]["OFFLOAD_SHUTDOWN_GRACE"])
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] > grace
    assert docs["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]
    assert set(docs["ConfigMap"]["data"]) <= SETTINGS
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert volumes["tenants"]["secret"]["secretName"] == docs["Secret"]["metadata"]["name"]  # keys are secrets


def test_compose_publishes_on_loopback_only():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert all(str(p).startswith("127.0.0.1:") for p in compose["services"]["proxy"]["ports"])


def test_example_secret_holds_proxy_keys_that_are_refused_as_they_are():
    secret = yaml.safe_load((ROOT / "deploy" / "k8s" / "secret.example.yaml").read_text())["stringData"]
    tenants = tomllib.loads(secret["tenants.toml"])["tenants"]
    assert all(t["api_keys"] for t in tenants.values())
    with pytest.raises(ValueError, match="example value"):
        Gatekeeper(tenants, server_key=None, allow_anonymous=False, upstream_allowlist=[])
    with pytest.raises(ValueError, match="example value"):
        ServerSettings(upstream_api_key=secret["OFFLOAD_UPSTREAM_API_KEY"])


K8S_VERSION = "1.30"  # the oldest Kubernetes the manifests are checked against (matchLabelKeys: 1.27+)
PROXY_MIB, SUPERVISOR_MIB = 150, 70  # measured, as docs/operations.md ("Memory") says


def manifests() -> dict[str, dict]:
    return {
        doc["kind"]: doc
        for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
    }


@pytest.mark.parametrize("path", sorted((ROOT / "deploy" / "k8s").glob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_is_valid_against_the_kubernetes_schema(path):
    """kubernetes-validate bundles the API's JSON schemas: no cluster and no network needed.
    Strict: a misspelt or misplaced field is an error, not ignored."""
    import kubernetes_validate

    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_schema_check_finds_a_misplaced_field():
    import kubernetes_validate

    deployment = manifests()["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["topologySpreadConstraints"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_the_deployment_survives_drains_and_spreads_over_nodes():
    docs = manifests()
    pods = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    budget = docs["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"].items() <= pods.items()
    assert (
        budget.get("maxUnavailable") == 1
        or budget["minAvailable"] < docs["HorizontalPodAutoscaler"]["spec"]["minReplicas"]
    )
    spread = docs["Deployment"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert all(c["labelSelector"]["matchLabels"].items() <= pods.items() and c["maxSkew"] == 1 for c in spread)


def test_the_grace_period_covers_the_longest_shutdown():
    """preStop, then the requests' grace, then the background summaries' (proxy.http.app.shutdown_budget)."""
    from proxy.http.app import shutdown_budget

    docs = manifests()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    sleep = float(re.search(r"sleep\((\d+(?:\.\d+)?)\)", " ".join(pre_stop)).group(1))
    settings = ServerSettings(shutdown_grace=float(docs["ConfigMap"]["data"]["OFFLOAD_SHUTDOWN_GRACE"]))
    assert pod["terminationGracePeriodSeconds"] >= sleep + shutdown_budget(settings)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["proxy"]
    assert float(compose["stop_grace_period"].rstrip("s")) >= shutdown_budget(ServerSettings())  # default grace
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_memory_limit_covers_the_documented_worst_case():
    from proxy.reload.search import WORKERS
    from proxy.reload.search_worker import MEMORY_LIMIT

    docs = manifests()
    workers = int(docs["ConfigMap"]["data"]["OFFLOAD_WORKERS"])
    worst = SUPERVISOR_MIB + workers * (PROXY_MIB + WORKERS * (MEMORY_LIMIT >> 20))
    limit = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", limit).groups()
    assert int(number) * (1024 if unit == "Gi" else 1) >= worst
    memory = (ROOT / "docs" / "operations.md").read_text()
    assert f"{PROXY_MIB} MiB" in memory and f"{SUPERVISOR_MIB} MiB" in memory and f"{MEMORY_LIMIT >> 20} MiB" in memory


def test_the_shutdown_budget_covers_the_secrets_check_made_after_the_server_stopped():
    """`serve` checks the canary again once its server has stopped (proxy.offload.canary.after_serve):
    bounded by the check's timeout, in the budget."""
    from proxy.http.app import shutdown_budget
    from proxy.offload.canary import check_timeout
    from proxy.offload.summarizer import CANCEL_WAIT
    from proxy.reload.search import REAP_WAIT
    from proxy.stats._recorder import STOP_TIMEOUT

    settings = ServerSettings(shutdown_grace=0, store_timeout=3.0)
    assert check_timeout(3.0) == 12.0
    assert shutdown_budget(settings) >= CANCEL_WAIT + REAP_WAIT + STOP_TIMEOUT + check_timeout(3.0)
