"""The process's memory of media refs: the same ref as make_ref, never another content's or namespace's."""

from __future__ import annotations

import struct

from proxy.core.images import ImageInfo, data_url_header, read_header, split_data_url
from proxy.core.markers import make_ref
from proxy.core.ref_cache import RefCache
from tests.harness.screens import b64, data_url, screenshot


def test_a_content_seen_again_gets_its_ref_without_being_hashed_again():
    cache = RefCache(min_chars=10)
    shot = data_url(screenshot(1))
    assert cache.ref("ns", "image", shot) == make_ref("ns", "image", shot)
    again = (shot + " ")[:-1]  # equal, another object (as a new request's JSON parse gives it)
    assert again is not shot
    assert cache.ref("ns", "image", again) == make_ref("ns", "image", shot)
    assert (cache.hits, cache.misses, cache.chars_hashed) == (1, 1, len(shot))


def test_the_ref_is_computed_per_namespace_and_kind():
    cache = RefCache(min_chars=10)
    shot = data_url(screenshot(2))
    refs = {cache.ref(ns, kind, shot) for ns in ("a", "b") for kind in ("image", "document")}
    assert refs == {make_ref(ns, kind, shot) for ns in ("a", "b") for kind in ("image", "document")}
    assert len(refs) == 4 and cache.hits == 0


def test_a_fingerprint_collision_is_hashed_never_given_the_other_contents_ref(monkeypatch):
    from proxy.core import ref_cache

    monkeypatch.setattr(ref_cache, "fingerprint", lambda content: 7)  # every content collides
    cache = RefCache(min_chars=10)
    one, two = data_url(screenshot(3)), data_url(screenshot(4))
    assert cache.ref("ns", "image", one) == make_ref("ns", "image", one)
    assert cache.ref("ns", "image", two) == make_ref("ns", "image", two)
    assert cache.ref("ns", "image", one) == make_ref("ns", "image", one)
    assert cache.hits == 0 and cache.misses == 3


def test_one_changed_character_is_another_ref():
    cache = RefCache(min_chars=10)
    shot = data_url(screenshot(5))
    middle = len(shot) // 2 + 1
    changed = shot[:middle] + ("A" if shot[middle] != "A" else "B") + shot[middle + 1 :]
    cache.ref("ns", "image", shot)
    assert cache.ref("ns", "image", changed) == make_ref("ns", "image", changed) != make_ref("ns", "image", shot)


def test_bounded_by_the_characters_it_holds():
    shots = [data_url(screenshot(i)) for i in range(6)]
    cache = RefCache(min_chars=10, max_chars=3 * max(map(len, shots)))
    for shot in shots:
        cache.ref("ns", "image", shot)
    assert len(cache) == 3  # the least recently used evicted
    assert cache.ref("ns", "image", shots[-1]) == make_ref("ns", "image", shots[-1]) and cache.hits == 1
    cache.ref("ns", "image", shots[0])
    assert cache.misses == 7


def test_small_and_huge_contents_are_hashed_and_not_kept():
    cache = RefCache(min_chars=100, max_chars=1000)
    assert cache.ref("ns", "image", "x" * 50) == make_ref("ns", "image", "x" * 50)
    assert cache.ref("ns", "image", "y" * 5000) == make_ref("ns", "image", "y" * 5000)
    assert len(cache) == 0 and cache.chars_hashed == 5050


def test_data_url_header_reads_what_split_and_read_header_read():
    shot = data_url(screenshot(0))
    assert data_url_header(shot) == ("image/png", ImageInfo("png", 1280, 800))
    assert data_url_header(shot) == (split_data_url(shot)[0], read_header(split_data_url(shot)[1]))
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 768, 1024, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    far = b"\xff\xd8\xff\xe1" + struct.pack(">H", 60_002) + b"E" * 60_000 + sof + b"\xff\xd9"
    assert data_url_header("data:image/jpeg;base64," + b64(far)) == ("image/jpeg", ImageInfo("jpeg", 1024, 768))
    for url in ("https://example.com/a.png", "data:image/png,notbase64", "data:image/png;base64", "", "data:"):
        assert data_url_header(url) is None
    assert data_url_header("data:image/png;base64,!!!!") == ("image/png", None)
