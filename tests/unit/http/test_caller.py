"""The tenants file (proxy.http.caller): read and checked in one place, its settings by the
per-request model, its access (proxy keys, upstreams) before any request. A tenant's label: its
tenants-file name, or its key's fingerprint (the vendor prefix and the last 4 characters, never
more of the key), made where the credential is seen."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from proxy.http.caller import (
    MAX_PREFIX,
    MIN_HIDDEN,
    TAIL,
    Gatekeeper,
    check_tenants,
    credential_label,
    key_fingerprint,
    load_tenants_file,
    tenants_from_config,
)

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


PROJ = "sk-proj-" + "Q7x9" * 30 + "AbCd"
ANT = "sk-ant-api03-" + "m2Zk" * 20 + "WXYZ"


@pytest.mark.parametrize(
    "key, shown",
    [
        (PROJ, "sk-proj…AbCd"),
        (ANT, "sk-ant…WXYZ"),
        ("sk-" + "a1B2" * 12 + "9876", "sk…9876"),
        ("sk-svcacct-" + "z" * 40 + "5555", "sk…5555"),  # a longer product prefix is not shown
        ("gsk_" + "r" * 40 + "tail", "gsk…tail"),
        ("AIza" + "Sy" * 16 + "LAST", "…LAST"),  # no lowercase vendor prefix: the last 4 only
        ("k" * 30 + "a\x01b\u00e9", "…a?b?"),  # an unprintable or non-ASCII tail is not echoed
    ],
)
def test_a_fingerprint_is_the_vendor_prefix_and_the_last_four(key, shown):
    assert key_fingerprint(key) == shown


@pytest.mark.parametrize("key", ["pk-dash-team-a-0001", "sk-short-key", "sk-proj-" + "x" * 19, "a" * 19])
def test_a_key_too_short_to_hide_enough_has_none(key):
    assert key_fingerprint(key) is None


@pytest.mark.parametrize("key", [PROJ, ANT, "sk-" + "abcd-" * 8 + "tail", "ab-cdefg-hij-" + "k" * 30, "k" * 20])
def test_it_never_shows_more_than_a_short_prefix_and_four(key):
    shown = key_fingerprint(key)
    assert shown is not None
    prefix, tail = shown.split("…")
    assert len(prefix) < MAX_PREFIX and len(tail) == TAIL and key.startswith(prefix) and key.endswith(tail)
    assert len(key) - len(prefix) - TAIL >= MIN_HIDDEN


def test_labels_of_several_keys_and_of_a_sub_tenant():
    other = "sk-" + "b" * 40 + "ZZZZ"
    # the first in a fixed order, whichever header held it
    assert credential_label([PROJ, other, PROJ], None) == credential_label([other, PROJ], None) == "sk…ZZZZ +1"
    assert credential_label(["short-key-1"], "team") is None
    long_sub = "run\x07" + "s" * 80
    label = credential_label([PROJ], long_sub)
    assert label.startswith("sk-proj…AbCd/run?") and len(label) <= len("sk-proj…AbCd/") + 40 and label.endswith("…")


def test_the_gatekeeper_labels_each_kind_of_caller():
    client = Gatekeeper({}, server_key=None, allow_anonymous=True, upstream_allowlist=[])
    assert client.identify(Headers({"authorization": f"Bearer {PROJ}"})).label == "sk-proj…AbCd"
    assert client.identify(Headers({"x-api-key": ANT, "x-offload-tenant": "ci"})).label == "sk-ant…WXYZ/ci"
    assert client.identify(Headers({"authorization": "Bearer short-key-01"})).label is None
    assert client.identify(Headers({})).label == "anonymous"
    keyed = Gatekeeper(
        {"acme": {"api_keys": ["pk-acme-000000001"]}},
        server_key="sk-operator-key-0000000000",
        allow_anonymous=False,
        upstream_allowlist=[],
    )
    assert keyed.identify(Headers({"authorization": "Bearer pk-acme-000000001"})).label == "acme"
    assert (
        keyed.identify(Headers({"authorization": "Bearer pk-acme-000000001", "x-offload-tenant": "bot"})).label
        == "acme/bot"
    )
    caller = client.identify(Headers({"authorization": f"Bearer {PROJ}"}))
    assert PROJ not in repr(caller.label) and PROJ[8:-4] not in (caller.label or "")
