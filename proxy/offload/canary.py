"""The store's canary: a replica whose secrets differ from those the store was written with
refuses to start, instead of silently using other namespaces.

The first replica writes one value, `CANARY_KEY`, holding a fingerprint of its names key
(`--namespace-key`, by default `--encryption-key`: what namespaces are derived from), sealed
with its encryption key (plain without one). Every replica reads it at startup:

- it opens with the current key and the fingerprint matches: fine (its TTL is renewed);
- it opens with `--encryption-key-previous` only (a rotation under way): fine, and it is sealed
  again with the current key, so replicas still on the old key alone refuse from now on;
- it does not open (another key, or this replica has none) or the fingerprint differs: refused;
- it was written without a key and this replica has one (encryption being switched on):
  sealed again with this key, with a warning (what was stored without a key lives in
  namespaces this replica does not read).

A store that cannot be reached at startup is not waited for: the server starts, and each
worker makes the check in the background once the store answers (`watch`); a mismatch found
then stops the server (SIGTERM), whose next start refuses with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import signal
from collections.abc import Callable

from proxy.offload.tenant import key
from proxy.store import Store, StoreUnavailable, open_store, sealer_for
from proxy.store.sealing import Sealer

log = logging.getLogger("proxy")
UNCHECKED_ENV = "_OFFLOAD_CANARY_UNCHECKED"  # set by `serve` for its workers when the store did not answer
RETRY = 5.0  # seconds between two attempts of a worker's check

CANARY_KEY = key("proxy", "canary", "v1")  # "proxy" is no namespace (those are 32 hex digits)
TTL = 400 * 86400  # renewed at every start
HEADER = b"offload-proxy canary v1\nnames:"


class CanaryMismatch(Exception):
    """This replica's secrets are not the ones the store was written with (a one-line reason)."""


def _content(names_key: str | None) -> bytes:
    if not names_key:
        return HEADER + b"none"
    return HEADER + hmac.new(names_key.encode(), b"offload-proxy/canary", hashlib.sha256).hexdigest()[:32].encode()


async def check(store: Store, sealer: Sealer, names_key: str | None) -> str | None:
    """Raise CanaryMismatch when this replica must not use the store; else a warning to log
    (or None). Raises StoreUnavailable when the store cannot be asked."""
    mine = _content(names_key)
    raw = await store.get(CANARY_KEY, ttl=TTL)
    if raw is None:
        if await store.put_if_absent(CANARY_KEY, sealer.seal(mine, CANARY_KEY), TTL):
            return None
        raw = await store.get(CANARY_KEY, ttl=TTL)  # another replica wrote it meanwhile
        if raw is None:
            return None
    found, opened_by = sealer.opened(raw, CANARY_KEY)
    if found is None:
        if not sealer.seals:
            raise CanaryMismatch("the store was written by replicas with an --encryption-key and this one has "
                                 "none: every replica sharing a store needs the same --encryption-key")
        raise CanaryMismatch("--encryption-key does not open the store's canary: another replica wrote it with a "
                             "different key. Every replica sharing a store needs the same --encryption-key (to "
                             "rotate it: --encryption-key-previous, docs/security.md)")
    if opened_by == "plain" and sealer.seals:
        await store.put(CANARY_KEY, sealer.seal(mine, CANARY_KEY), TTL)
        return ("the store was used without --encryption-key until now: what was stored without it stays in "
                "namespaces this replica does not read, and replicas without the key now refuse to start")
    if found != mine:
        raise CanaryMismatch("--namespace-key (by default --encryption-key) is not the one the store's other "
                             "replicas derive tenant namespaces from: every replica needs the same one")
    if opened_by == "previous":
        await store.put(CANARY_KEY, sealer.seal(mine, CANARY_KEY), TTL)
    return None


def check_timeout(store_timeout: float) -> float:
    """How long (s) `serve`'s check may take (at startup, and after the server stopped)."""
    return max(2.0, 4 * store_timeout)


def startup_check(settings) -> str | None:
    """`offload-proxy serve`, before any worker starts: CanaryMismatch when this replica must not
    start; else a line to show (a warning, or that the store could not be asked), or None.
    `settings`: the ServerSettings."""

    async def run() -> str | None:
        store = open_store(settings)
        try:
            return await asyncio.wait_for(check(store, sealer_for(settings), settings.names_key),
                                          check_timeout(settings.store_timeout))
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except (StoreUnavailable, asyncio.TimeoutError, OSError) as exc:
        os.environ[UNCHECKED_ENV] = "1"  # the workers (this process, or spawned with its environment)
        return (f"the store's secrets canary was not checked (the store is unreachable: {exc or 'timed out'}); "
                "the workers check it once the store answers")


async def watch(store: Store, sealer: Sealer, names_key: str | None, *, stop: Callable[[], None],
                every: float = RETRY) -> None:
    """The check the startup could not make, made once the store answers: on a mismatch it is
    logged and `stop` called."""
    while True:
        try:
            note = await check(store, sealer, names_key)
        except StoreUnavailable:
            await asyncio.sleep(every)
            continue
        except CanaryMismatch as exc:
            log.error("%s: stopping", exc)
            stop()
            return
        if note is not None:
            log.warning(note)
        return


def after_serve(settings) -> None:
    """`offload-proxy serve` once its server has stopped: when the workers were to make the check
    (the store did not answer at startup), it is made again, so that a server its workers stopped
    for a mismatch exits with the reason and status 1 (several workers: the supervisor would
    otherwise end as after an operator's SIGTERM, with 0, and a supervisor restarting only
    failures would take the mismatch for a normal stop). `settings`: the ServerSettings."""
    if os.environ.get(UNCHECKED_ENV) != "1":
        return
    try:
        startup_check(settings)  # a store still unreachable: bounded, and the stop goes on
    except CanaryMismatch as exc:
        raise SystemExit(f"offload-proxy: {exc}") from None


def watch_if_unchecked(store: Store, sealer: Sealer, names_key: str | None, *, workers: int) -> asyncio.Task | None:
    """A worker's `watch`, when `serve` could not check the store at startup (None otherwise)."""
    if os.environ.get(UNCHECKED_ENV) != "1":
        return None

    def stop() -> None:  # the supervisor when there is one: it stops every worker
        os.kill(os.getppid() if workers > 1 else os.getpid(), signal.SIGTERM)

    return asyncio.get_running_loop().create_task(watch(store, sealer, names_key, stop=stop))
