"""The store's canary: a replica whose secrets differ from those the store was written with
refuses to start, instead of silently using other namespaces, and the replicas running keep
the canary there.

The first replica writes one value, `CANARY_KEY`: a lineage in clear (when the fleet's canary
was first written, and a random tag) and, sealed with its encryption key (plain without one),
that lineage and a fingerprint of its names key (`--namespace-key`, by default
`--encryption-key`: what namespaces are derived from). Every replica reads it at startup:

- it opens with the current key and the fingerprint matches: fine (its TTL is renewed);
- it opens with `--encryption-key-previous` only (a rotation under way): fine, and it is sealed
  again with the current key (same lineage), so replicas still on the old key alone refuse
  from now on;
- it does not open (another key, or this replica has none) or the fingerprint differs: refused;
- it was written without a key and this replica has one (encryption being switched on):
  sealed again with this key, with a warning (what was stored without a key lives in
  namespaces this replica does not read).

A store without a canary of this layout but with one of the layout before (`CANARY_V1`, no
lineage) has it checked first by the same rules (an upgrade: a replica with another key is
refused still).

Running, each worker of `serve` checks it again every `KEEP_EVERY` s and as soon as the store
answers after an outage (`keep`), knowing the lineage it was checked against:

- gone (a Redis restarted without persistence, flushed; or past its TTL): written again, so a
  replica with other secrets starting afterwards is refused;
- written by a replica with other secrets (that replica started while the store had lost it):
  the older lineage is the fleet's. A newer one is overwritten with this replica's, logged as an
  error; the replica that wrote it finds an older lineage it cannot open at its next check, logs
  why and stops (as SIGTERM does), and its next start is refused. So correctly configured
  replicas are never locked out by it;
- not opened, but of this replica's lineage: the other replicas moved on (a rotation, or
  encryption switched on, without this one): logged, once, as an error; this replica goes on
  serving (its values are still read by the others during a rotation) and is refused once it
  restarts with its old secrets.

A store that cannot be reached at startup is not waited for: the server starts, and each worker
makes the startup check once the store answers, then keeps the canary as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from proxy.offload.tenant import key
from proxy.store import Store, StoreSettings, StoreUnavailable, open_store, sealer_for
from proxy.store.sealing import Sealer

log = logging.getLogger("proxy")
UNCHECKED_ENV = "_OFFLOAD_CANARY_UNCHECKED"  # set by `serve` for its workers when the store did not answer
LINEAGE_ENV = "_OFFLOAD_CANARY_LINEAGE"  # ...else the lineage its startup check found
KEEP_EVERY = 5.0  # seconds between two checks of a running worker (and of one waiting for the store)

CANARY_KEY = key("proxy", "canary", "v2")  # "proxy" is no namespace (those are 32 hex digits)
CANARY_V1 = key("proxy", "canary", "v1")  # the layout before the lineage: read when v2 is missing at startup
TTL = 400 * 86400  # renewed at every start
HEADER = b"offload-proxy canary v2\nlineage:"
HEADER_V1 = b"offload-proxy canary v1\nnames:"

LOST = (
    "the store had lost its secrets canary (restarted without persistence, or flushed): written again, "
    "so a replica with other secrets is refused"
)
RESTORED = (
    "a replica with other secrets wrote the store's canary after the store had lost it: written again "
    "with this replica's (the fleet's, older); that replica stops at its next check"
)
SWITCHED_ON = (
    "the store was used without --encryption-key until now: what was stored without it stays in "
    "namespaces this replica does not read, and replicas without the key now refuse to start"
)
MOVED_ON = (
    "the store's canary no longer opens with this replica's secrets, of the same fleet: the other "
    "replicas moved on (a key rotation, or encryption switched on); this replica goes on serving, "
    "restart it with their secrets"
)


class CanaryMismatch(Exception):
    """This replica's secrets are not the ones the store was written with (a one-line reason)."""


@dataclass(frozen=True)
class Checked:
    lineage: str  # of the canary this replica's secrets open (from now on its own)
    note: str | None = None  # a warning to log
    alarm: bool = False  # ...as an error: another replica's secrets differ from this one's


def _fingerprint(names_key: str | None) -> bytes:
    if not names_key:
        return b"none"
    return hmac.new(names_key.encode(), b"offload-proxy/canary", hashlib.sha256).hexdigest()[:32].encode()


def _content(names_key: str | None, lineage: str) -> bytes:
    return HEADER + lineage.encode() + b"\nnames:" + _fingerprint(names_key)


def _value(sealer: Sealer, names_key: str | None, lineage: str) -> bytes:
    return HEADER + lineage.encode() + b"\n" + sealer.seal(_content(names_key, lineage), CANARY_KEY)


def _parse(raw: bytes) -> tuple[str | None, bytes]:
    """(its lineage, as the clear part says; what is sealed)."""
    if not raw.startswith(HEADER):
        return None, raw
    lineage, _, sealed = raw[len(HEADER) :].partition(b"\n")
    return lineage.decode("ascii", "replace"), sealed


def new_lineage() -> str:
    return f"{time.time():.6f}-{secrets.token_hex(4)}"


def _older(a: str, b: str) -> bool:
    """Did lineage `a` begin before `b`?"""

    def since(lineage: str) -> tuple[float, str]:
        try:
            return float(lineage.partition("-")[0]), lineage
        except ValueError:
            return float("inf"), lineage  # unreadable: the newest

    return since(a) < since(b)


def _refusal(sealer: Sealer, found: bytes | None) -> str:
    if found is None and not sealer.seals:
        return (
            "the store was written by replicas with an --encryption-key and this one has none: every replica "
            "sharing a store needs the same --encryption-key"
        )
    if found is None:
        return (
            "--encryption-key does not open the store's canary: another replica wrote it with a different key. "
            "Every replica sharing a store needs the same --encryption-key (to rotate it: "
            "--encryption-key-previous, docs/security.md)"
        )
    return (
        "--namespace-key (by default --encryption-key) is not the one the store's other replicas derive tenant "
        "namespaces from: every replica needs the same one"
    )


async def _check_v1(store: Store, sealer: Sealer, names_key: str | None) -> None:
    """The canary of the layout before, if any, by the startup rules: CanaryMismatch."""
    raw = await store.get(CANARY_V1)
    if raw is None:
        return
    found, opened_by = sealer.opened(raw, CANARY_V1)
    if found is None or (found != HEADER_V1 + _fingerprint(names_key) and not (opened_by == "plain" and sealer.seals)):
        raise CanaryMismatch(_refusal(sealer, found))


async def check(store: Store, sealer: Sealer, names_key: str | None, *, lineage: str | None = None) -> Checked:
    """At startup (`lineage` None): CanaryMismatch when this replica must not use the store. A
    running replica's (`lineage`: the one it was checked against): CanaryMismatch only when the
    canary it cannot open is of an older lineage (this replica is the newcomer). Raises
    StoreUnavailable when the store cannot be asked."""
    raw = await store.get(CANARY_KEY, ttl=TTL if lineage is None else None)  # running: no write every few seconds
    if raw is None:
        if lineage is None:
            await _check_v1(store, sealer, names_key)
        mine = lineage or new_lineage()
        if await store.put_if_absent(CANARY_KEY, _value(sealer, names_key, mine), TTL):
            return Checked(mine, None if lineage is None else LOST)
        raw = await store.get(CANARY_KEY)  # another replica wrote it meanwhile
        if raw is None:
            return Checked(mine)
    theirs, sealed = _parse(raw)
    found, opened_by = sealer.opened(sealed, CANARY_KEY)
    switching_on = opened_by == "plain" and sealer.seals
    if theirs is None or found is None or (found != _content(names_key, theirs) and not switching_on):
        if lineage is None:
            raise CanaryMismatch(_refusal(sealer, found))
        return await _dispute(store, sealer, names_key, lineage=lineage, theirs=theirs, refusal=_refusal(sealer, found))
    kept = lineage if lineage is not None and _older(lineage, theirs) else theirs  # the oldest is the fleet's
    if kept != theirs or opened_by == "previous" or switching_on:
        await store.put(CANARY_KEY, _value(sealer, names_key, kept), TTL)
    return Checked(kept, SWITCHED_ON if switching_on else None)


async def _dispute(
    store: Store, sealer: Sealer, names_key: str | None, *, lineage: str, theirs: str | None, refusal: str
) -> Checked:
    """A running replica finds a canary its secrets do not open: whose lineage is the fleet's?"""
    if theirs == lineage:
        return Checked(lineage, f"{MOVED_ON} ({refusal})", alarm=True)
    if theirs is None or _older(lineage, theirs):
        await store.put(CANARY_KEY, _value(sealer, names_key, lineage), TTL)
        return Checked(lineage, RESTORED, alarm=True)
    raise CanaryMismatch(refusal)


def check_timeout(store_timeout: float) -> float:
    """How long (s) `serve`'s check may take (at startup, and after the server stopped)."""
    return max(2.0, 4 * store_timeout)


def startup_check(settings: StoreSettings) -> str | None:
    """`offload-proxy serve`, before any worker starts: CanaryMismatch when this replica must not
    start; else a line to show (a warning, or that the store could not be asked), or None.
    The workers are told (in the environment) what it found. `settings`: the ServerSettings."""
    try:
        checked = _checked_now(settings, lineage=None)
    except (StoreUnavailable, asyncio.TimeoutError, OSError) as exc:
        os.environ.pop(LINEAGE_ENV, None)
        os.environ[UNCHECKED_ENV] = "1"  # the workers (this process, or spawned with its environment)
        return (
            f"the store's secrets canary was not checked (the store is unreachable: {exc or 'timed out'}); "
            "the workers check it once the store answers"
        )
    os.environ.pop(UNCHECKED_ENV, None)
    os.environ[LINEAGE_ENV] = checked.lineage
    return checked.note


def _checked_now(settings: StoreSettings, *, lineage: str | None) -> Checked:
    async def run() -> Checked:
        store = open_store(settings)
        try:
            return await asyncio.wait_for(
                check(store, sealer_for(settings), settings.names_key, lineage=lineage),
                check_timeout(settings.store_timeout),
            )
        finally:
            await store.close()

    return asyncio.run(run())


def after_serve(settings: StoreSettings) -> None:
    """`offload-proxy serve` once its server has stopped: the canary is checked once more (with the
    lineage of the startup check, if it was made), so that a server its workers stopped for a
    mismatch exits with the reason and status 1 (several workers: the supervisor would otherwise
    end as after an operator's SIGTERM, with 0, and a supervisor restarting only failures would
    take the mismatch for a normal stop). `settings`: the ServerSettings."""
    unchecked, lineage = os.environ.get(UNCHECKED_ENV) == "1", os.environ.get(LINEAGE_ENV)
    if not unchecked and not lineage:
        return
    try:
        _checked_now(settings, lineage=None if unchecked else lineage)
    except (StoreUnavailable, asyncio.TimeoutError, OSError):
        return  # a store still unreachable: bounded, and the stop goes on
    except CanaryMismatch as exc:
        raise SystemExit(f"offload-proxy: {exc}") from None


async def keep(
    store: Store,
    sealer: Sealer,
    names_key: str | None,
    *,
    lineage: str | None,
    stop: Callable[[], None],
    every: float = KEEP_EVERY,
    woken: asyncio.Event | None = None,
) -> None:
    """A worker's canary, while it runs: checked every `every` s and when `woken` is set (the
    store answers again), from `lineage` (None: the startup check still to make); on a mismatch
    this replica must not go on with, logged and `stop` called."""
    said: str | None = None
    while True:
        try:
            checked = await check(store, sealer, names_key, lineage=lineage)
        except StoreUnavailable:
            pass
        except CanaryMismatch as exc:
            log.error("%s: stopping", exc)
            stop()
            return
        except Exception:  # a bug: the check is made again, the server goes on
            log.exception("the store's secrets canary could not be checked")
        else:
            lineage = checked.lineage
            if checked.note is not None and checked.note != said:
                log.log(logging.ERROR if checked.alarm else logging.WARNING, checked.note)
            said = checked.note
        await _rest(every, woken)


async def _rest(every: float, woken: asyncio.Event | None) -> None:
    if woken is None:
        await asyncio.sleep(every)
        return
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(woken.wait(), every)
    woken.clear()


def keep_if_served(
    store: Store, sealer: Sealer, names_key: str | None, *, workers: int, woken: asyncio.Event | None = None
) -> asyncio.Task[None] | None:
    """A worker's `keep`, when `serve` runs it (None in an app built otherwise: a test, a program)."""
    unchecked, lineage = os.environ.get(UNCHECKED_ENV) == "1", os.environ.get(LINEAGE_ENV)
    if not unchecked and not lineage:
        return None

    def stop() -> None:  # the supervisor when there is one: it stops every worker
        os.kill(os.getppid() if workers > 1 else os.getpid(), signal.SIGTERM)

    return asyncio.get_running_loop().create_task(
        keep(store, sealer, names_key, lineage=None if unchecked else lineage, stop=stop, woken=woken)
    )
