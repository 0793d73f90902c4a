"""Which arm of a holdout a session is in: a pure function of the session, so every replica of a
fleet, and the same replica after a restart, puts a session in the same arm with nothing stored.

A holdout (`--holdout 0.1`) forwards a stable fraction of sessions unchanged (the control arm)
and manages the others. The arm comes from a keyed digest of the tenant's namespace and the
session id mapped to [0, 1): below the fraction is control. The namespace keeps two tenants'
sessions of the same name apart; the salt (`--holdout-salt`) lets an operator draw a new split.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Literal

Arm = Literal["control", "managed"]
ARMS: tuple[Arm, Arm] = ("control", "managed")


def position(namespace: str, session: str, *, salt: str = "") -> float:
    """Where the session falls in [0, 1): uniform over sessions, the same wherever computed."""
    digest = blake2b(
        f"{namespace}\x00{session}".encode(), digest_size=8, key=salt.encode()[:64], person=b"offload-arm"
    ).digest()
    return int.from_bytes(digest, "big") / 2**64


def arm(namespace: str, session: str | None, fraction: float, *, salt: str = "") -> Arm | None:
    """The session's arm, or None when there is no holdout (fraction 0) or no session to decide by
    (a request the statistics give no session is managed, outside the comparison)."""
    if fraction <= 0 or not session:
        return None
    return "control" if position(namespace, session, salt=salt) < fraction else "managed"
