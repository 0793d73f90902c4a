"""Storage backends: Redis when a URL is configured, else the embedded SQLite store."""

from __future__ import annotations

from proxy.config import ServerSettings
from proxy.store.base import Store, StoreUnavailable
from proxy.store.sealing import Sealer


def open_store(settings: ServerSettings) -> Store:
    if settings.redis_url:
        from proxy.store.redis import RedisStore

        return RedisStore(settings.redis_url, timeout=settings.store_timeout, cluster=settings.redis_cluster)
    from proxy.store.sqlite import SQLiteStore

    return SQLiteStore(settings.data_dir)


def sealer_for(settings: ServerSettings) -> Sealer:
    """Seals with --encryption-key, opens with it or --encryption-key-previous, keys names with
    --namespace-key (by default the encryption key)."""
    return Sealer(settings.encryption_key, previous=settings.encryption_key_previous, names=settings.names_key)


__all__ = ["Store", "StoreUnavailable", "open_store", "sealer_for"]
