"""A tenant's label: its tenants-file name, or its key's fingerprint (the vendor prefix and the
last 4 characters, never more of the key), made where the credential is seen."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from proxy.http.caller import Gatekeeper
from proxy.http.fingerprint import MAX_PREFIX, MIN_HIDDEN, TAIL, credential_label, key_fingerprint

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
