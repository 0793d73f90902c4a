"""Sealing at rest: the current key seals, the previous one still opens; names keyed apart."""

from __future__ import annotations

import pytest

from proxy.config import ServerSettings
from proxy.store import sealer_for
from proxy.store.sealing import MAGIC, Sealer

OLD, NEW = "the old encryption key", "the new encryption key"


def test_values_sealed_with_the_previous_key_still_open_and_new_ones_use_the_current():
    before = Sealer(OLD).seal(b"content", "off:{k}:item:r")
    rotating = Sealer(NEW, previous=OLD, names=OLD)
    assert rotating.opened(before, "off:{k}:item:r") == (b"content", "previous")
    after = rotating.seal(b"content", "off:{k}:item:r")
    assert after.startswith(MAGIC) and Sealer(NEW).open(after, "off:{k}:item:r") == b"content"
    assert Sealer(OLD).open(after, "off:{k}:item:r") is None  # new values: the new key only
    assert rotating.opened(after, "off:{k}:item:r") == (b"content", "current")
    assert rotating.open(before, "off:{other}:item:r") is None  # the store key still binds the value
    assert Sealer(NEW).open(before, "off:{k}:item:r") is None  # once the previous key is dropped
    assert Sealer(None).opened(b"plain", "k") == (b"plain", "plain")
    assert Sealer(None).opened(before, "k") == (None, None)


def test_names_stay_put_when_the_sealing_key_rotates():
    assert Sealer(NEW, names=OLD).key_name("session-1", "ns") == Sealer(OLD).key_name("session-1", "ns")
    assert Sealer(NEW).key_name("session-1", "ns") != Sealer(OLD).key_name("session-1", "ns")
    assert Sealer(None).key_name("session-1", "ns") == "session-1"


def test_the_settings_give_the_rotation_sealer_and_a_names_key_that_does_not_move(tmp_path):
    plain = ServerSettings(data_dir=tmp_path, encryption_key=OLD)
    rotating = ServerSettings(data_dir=tmp_path, encryption_key=NEW, encryption_key_previous=OLD, namespace_key=OLD)
    assert plain.names_key == rotating.names_key == OLD
    assert sealer_for(rotating).open(sealer_for(plain).seal(b"x", "k"), "k") == b"x"
    assert sealer_for(rotating).key_name("s", "ns") == sealer_for(plain).key_name("s", "ns")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"encryption_key_previous": OLD}, "needs --encryption-key"),
        ({"encryption_key": NEW, "encryption_key_previous": OLD}, "--namespace-key"),
        ({"encryption_key": NEW, "encryption_key_previous": "change-me"}, "example value"),
        ({"encryption_key": NEW, "encryption_key_previous": NEW, "namespace_key": OLD}, "is --encryption-key itself"),
    ],
)
def test_a_rotation_without_what_it_needs_is_refused(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        ServerSettings(data_dir=tmp_path, **options)
