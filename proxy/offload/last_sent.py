"""The sessions' last forwarded prefixes in the store (`proxy.core.prompt_cache.LastSent`): one key per
session under the tenant's namespace, the session's name keyed like the events' (`Sealer.key_name`),
the value sealed like content, expiring `RECORD_TTL` seconds after the last write (at most the
tenant's TTL). Every replica writes what it forwarded and reads what any replica did.

Neither call ever raises: a store that fails reads as no record (the decisions then act as before
the record existed) and loses the write (logged), the request going on either way.
"""

from __future__ import annotations

import logging

from proxy.core.prompt_cache import LastSent, decode
from proxy.offload.tenant import key
from proxy.offload.tenant_store import TenantStore
from proxy.store import StoreUnavailable, resealing

log = logging.getLogger("proxy.offload.last_sent")

RECORD_TTL = 24 * 3600  # seconds a session's record outlives its last turn: longer than any cache TTL


def record_key(tenant: TenantStore, session: str) -> str:
    return key(tenant.namespace, "sent", tenant.sealer.key_name(session, tenant.namespace))


async def read(tenant: TenantStore, session: str | None) -> LastSent | None:
    """The session's record; None without a session, without a record, or with the store failing."""
    if not session:
        return None
    store_key = record_key(tenant, session)
    try:
        raw = await tenant.store.get(store_key)
        if raw is None:
            return None
        return decode(await resealing.opened(tenant.store, store_key, raw, sealer=tenant.sealer))
    except StoreUnavailable:
        return None  # counted by the store's guard (offload_store_errors_total)
    except Exception:  # noqa: BLE001 - a decision input, never a request's failure
        log.warning("reading the session's last sent prefix failed", exc_info=True)
        return None


async def write(
    tenant: TenantStore, session: str | None, sent: LastSent, *, previous: LastSent | None = None
) -> LastSent:
    """Store `sent` as the session's record (its turns counted on from `previous`, the record
    read before the turn, when given); returns what it stored, or would have."""
    record = previous.then(sent) if previous is not None else sent
    if not session:
        return record
    store_key = record_key(tenant, session)
    try:
        await tenant.store.put(store_key, tenant.sealer.seal(record.encode(), store_key), min(tenant.ttl, RECORD_TTL))
    except StoreUnavailable:
        pass  # counted by the store's guard
    except Exception:  # noqa: BLE001 - after the answer: never a request's failure
        log.warning("storing the session's last sent prefix failed", exc_info=True)
    return record
