"""The tenants file (proxy.http.tenants_file): read and checked in one place, its settings by the
per-request model, its access (proxy keys, upstreams) before any request."""

from __future__ import annotations

import pytest

from proxy.http.caller import Gatekeeper
from proxy.http.tenants_file import check_tenants, load_tenants_file, tenants_from_config

KEY = "sk-proxy-acme-0123456789"


def test_reading_the_file_checks_its_access_too(tmp_path):
    path = tmp_path / "tenants.toml"
    path.write_text('[tenants.acme]\napi_keys = ["short"]\n')
    with pytest.raises(ValueError, match="tenant 'acme': a proxy key needs at least 12 characters"):
        load_tenants_file(path)


def test_the_settings_of_every_tenant_are_checked_before_any_access(tmp_path):
    """As when the file was checked by the settings first, then by the gatekeeper."""
    tenants = {"a": {"api_keys": ["short"]}, "b": {"max_total_tokens": -5}}
    with pytest.raises(ValueError, match="tenant 'b': max_total_tokens"):
        check_tenants(tenants)


def test_an_unknown_key_names_the_settings_and_the_other_keys():
    with pytest.raises(ValueError) as info:
        check_tenants({"t": {"max_total_token": 5}})
    assert str(info.value).startswith("tenant 't': unknown key max_total_token (settings: mode, max_total_tokens")
    assert "also anthropic_api_key, anthropic_upstream, api_keys" in str(info.value)


def test_the_gatekeeper_reads_the_access_the_file_was_checked_for(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text(f"tenants:\n  acme:\n    api_keys: [{KEY}]\n    upstream: https://gw.example\n    keep_images: 2\n")
    tenants = load_tenants_file(path)
    gate = Gatekeeper(tenants, server_key=None, allow_anonymous=False, upstream_allowlist=[])
    assert gate.tenants == tenants_from_config(tenants)
    assert gate.tenants["acme"].upstream == "https://gw.example/v1"


def test_no_file_no_tenants():
    assert load_tenants_file(None) == {}
