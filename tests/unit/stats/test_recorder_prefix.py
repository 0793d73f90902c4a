"""Prefix reuse as a provider's prompt cache would see it: by prefix, in whole blocks, per tenant,
within a bounded and expiring memory."""

from __future__ import annotations

import os
import threading

import pytest

from proxy.stats._recorder import BLOCK, PrefixCache, chain

A, B = "a" * 32, "b" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def body(blocks: float) -> bytes:
    return os.urandom(int(blocks * BLOCK))


def test_the_chain_covers_whole_blocks_and_depends_on_everything_before():
    data = body(3.5)
    digests = chain(A, data)
    assert len(digests) == 3 and all(len(d) == 16 for d in digests)
    assert chain(A, data[: 3 * BLOCK]) == digests  # the partial block adds no digest
    changed = bytes([data[0] ^ 1]) + data[1:]
    assert all(x != y for x, y in zip(chain(A, changed), digests))  # an early byte changes them all
    assert all(x != y for x, y in zip(chain(B, data), digests))  # seeded with the namespace
    assert chain(A, data[: BLOCK - 1]) == []


def test_the_same_body_twice_is_reused_but_for_its_last_partial_block():
    cache = PrefixCache()
    data = body(4.5)
    assert cache.reuse(A, data) == 0.0  # never seen
    assert cache.reuse(A, data) == 4 / 5  # the trailing partial block never is
    whole = body(4)
    cache.reuse(A, whole)
    assert cache.reuse(A, whole) == 1.0  # a multiple of the block: all of it
    small = body(0.5)
    assert cache.reuse(A, small) == 0.0 and cache.reuse(A, small) == 0.0  # shorter than a block: never
    assert cache.reuse(A, b"") == 0.0


def test_appended_history_reuses_the_old_part():
    cache = PrefixCache()
    first = body(6)
    cache.reuse(A, first)
    longer = first + body(4)
    assert cache.reuse(A, longer) == 6 / 10
    longest = longer + body(2.5)
    assert cache.reuse(A, longest) == 10 / 13
    # the old body ending inside a block: that block differs once appended to
    odd = body(2.5)
    cache.reuse(A, odd)
    assert cache.reuse(A, odd + body(1.5)) == 2 / 4


def test_a_changed_early_byte_reuses_nothing_after_it():
    cache = PrefixCache()
    data = body(8)
    cache.reuse(A, data)
    at = 2 * BLOCK + 10  # in the third block
    changed = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    assert cache.reuse(A, changed) == 2 / 8  # the two blocks before it only, though the rest is equal
    first = bytes([data[0] ^ 0xFF]) + data[1:]
    assert cache.reuse(A, first) == 0.0


def test_another_tenant_never_reuses():
    cache = PrefixCache()
    data = body(5)
    cache.reuse(A, data)
    assert cache.reuse(B, data) == 0.0
    assert cache.reuse(A, data) == 1.0 and cache.reuse(B, data) == 1.0


def test_bounded_by_entries_oldest_evicted_first():
    cache = PrefixCache(max_entries=10)
    old, new = body(6), body(6)
    cache.reuse(A, old)
    cache.reuse(A, new)
    assert len(cache) == 10  # old's first two blocks evicted
    assert cache.reuse(A, new) == 1.0
    assert cache.reuse(A, old) == 0.0  # its first block went: a prefix cannot be served from its middle


def test_a_prefix_seen_again_is_kept_longer():
    clock = Clock()
    cache = PrefixCache(max_entries=8, clock=clock)
    shared = body(4)
    cache.reuse(A, shared + body(2))
    cache.reuse(A, shared + body(2))  # the shared blocks are the most recent now
    cache.reuse(A, body(2))  # evicts the two oldest: the first body's tail
    assert cache.reuse(A, shared) == 1.0


def test_expired_after_the_max_age_since_last_seen():
    clock = Clock()
    cache = PrefixCache(max_age=3600, clock=clock)
    data = body(3)
    cache.reuse(A, data)
    clock.now += 3000
    assert cache.reuse(A, data) == 1.0  # seen again: its age starts over
    clock.now += 3000
    assert cache.reuse(A, data) == 1.0
    clock.now += 3601
    assert cache.reuse(A, data) == 0.0
    assert len(cache) == 3  # expired ones are gone, the body is remembered anew


def test_expiry_keeps_what_is_younger():
    clock = Clock()
    cache = PrefixCache(max_age=100, clock=clock)
    old = body(2)
    cache.reuse(A, old)
    clock.now += 60
    young = body(2)
    cache.reuse(A, young)
    clock.now += 60
    assert cache.reuse(A, young) == 1.0 and cache.reuse(A, old) == 0.0


@pytest.mark.parametrize("threads", [4])
def test_shared_between_threads(threads):
    cache = PrefixCache(max_entries=50)
    bodies = [body(20) for _ in range(threads)]
    errors = []

    def run(data: bytes) -> None:
        try:
            for _ in range(50):
                cache.reuse(A, data)
        except Exception as exc:  # pragma: no cover - the failure itself
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(b,)) for b in bodies]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors and len(cache) <= 50
