"""The deployment files agree with the code (no Docker engine needed to check that)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
import yaml

from proxy.http.caller import Gatekeeper
from proxy.config import ServerSettings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {f"OFFLOAD_{name.upper()}" for name in ServerSettings.model_fields}


def offload_vars(text: str) -> set[str]:
    return set(re.findall(r"\bOFFLOAD_[A-Z_]+\b", text))


def test_every_offload_variable_in_deploy_files_is_a_setting():
    for path in [ROOT / "docker-compose.yml", ROOT / "deploy" / "Dockerfile", *(ROOT / "deploy" / "k8s").glob("*.yaml")]:
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
    assert spec["replicas"] > 1
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
