"""The storage contract shared by the Redis and the embedded (SQLite) stores.

Values are opaque bytes. Every key carries an idle TTL: `touch` and `get(..., ttl=)` push its
expiry out again, so content that is still in use never expires mid-session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from proxy.errors import Failure, Kind


class StoreUnavailable(Failure):
    """The backing store cannot be reached (or timed out)."""

    kind = Kind.STORE_UNAVAILABLE
    code = "store_unavailable"


class Store(Protocol):
    async def put(self, key: str, value: bytes, ttl: int) -> None: ...

    async def put_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        """Atomic create; False when the key already exists (used as a lock)."""
        ...

    async def get(self, key: str, ttl: int | None = None) -> bytes | None:
        """The value, or None; with `ttl`, its expiry is extended in the same step."""
        ...

    async def touch(self, keys: Sequence[str], ttl: int, *, slack: int = 0) -> list[bool]:
        """For each key, whether it exists (asked of the backend on every call, never assumed);
        each live key's expiry is pushed out to `ttl` unless more than `ttl - slack` seconds of
        it are left, so with a slack a key in constant use is rewritten once per `slack` s."""
        ...

    async def delete(self, key: str) -> None: ...

    async def delete_if(self, key: str, value: bytes) -> bool:
        """Compare-and-delete: delete the key only while it holds `value` (a lease's owner
        token), atomically; False when it holds another value or is gone."""
        ...

    async def extend_if(self, key: str, value: bytes, ttl: int) -> bool:
        """Compare-and-extend: push the key's expiry out to `ttl` only while it holds `value`,
        atomically; False when it holds another value or is gone (a lease lost)."""
        ...

    async def replace_if(self, key: str, expected: bytes, value: bytes) -> bool:
        """Compare-and-set: `value` replaces the key's value only while it holds `expected`
        (its expiry kept), atomically; False when it holds another value or is gone (a value
        sealed again during a key rotation never overwrites what another writer put since)."""
        ...

    async def add_members(self, key: str, members: Sequence[str], ttl: int, *, slack: int = 0) -> None:
        """Add to a set (idle TTL applies to the whole set). With a slack, a set that already
        holds every member and has more than `ttl - slack` seconds left is not written."""
        ...

    async def members(self, key: str) -> set[str]: ...

    async def push(self, key: str, value: bytes, *, max_len: int, ttl: int) -> None:
        """Append to a capped list (oldest dropped past max_len)."""
        ...

    async def items(self, key: str) -> list[bytes]:
        """A capped list, oldest first."""
        ...

    async def replace_items(self, key: str, replacements: Mapping[bytes, bytes]) -> int:
        """In a capped list, every item equal to a key of `replacements` becomes its value, in
        place and atomically (items pushed or trimmed meanwhile stay as they are); how many were."""
        ...

    async def incr(self, key: str, amount: int, ttl: int) -> int:
        """Add `amount` to an integer counter (created at 0) atomically; its idle TTL restarts."""
        ...

    async def incr_fields(self, key: str, amounts: Mapping[str, int | float], ttl: int) -> None:
        """Add to numeric fields of a hash atomically (each created at 0; an int stays an int);
        the whole hash's idle TTL restarts."""
        ...

    async def set_fields(
        self, key: str, values: Mapping[str, int | float], ttl: int, *, only_new: bool = False
    ) -> None:
        """Set numeric fields of a hash (`only_new`: only those it does not hold yet, each
        atomically: the first writer's value stays); the whole hash's idle TTL restarts."""
        ...

    async def hashes(self, keys: Sequence[str]) -> list[dict[str, int | float]]:
        """The fields of each hash, in the order of `keys` ({} for a missing one)."""
        ...

    async def rank(self, key: str, member: str, score: float, *, ttl: int, drop_below: float | None = None) -> None:
        """Set a member's score in a ranked set; with `drop_below`, members scored lower go."""
        ...

    async def rank_add(self, key: str, amounts: Mapping[str, float], ttl: int) -> None:
        """Add to members' scores in a ranked set (a new member starts from 0); idle TTL."""
        ...

    async def ranked(self, key: str, offset: int, limit: int) -> tuple[int, list[tuple[str, float]]]:
        """(how many members, a page of them: highest score first)."""
        ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...
