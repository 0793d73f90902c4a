"""Storage backends: Redis when a URL is configured, else the embedded SQLite store."""

from __future__ import annotations

from proxy.config import ServerSettings
from proxy.store.base import Store, StoreUnavailable


def open_store(settings: ServerSettings) -> Store:
    if settings.redis_url:
        from proxy.store.redis import RedisStore

        return RedisStore(settings.redis_url, timeout=settings.store_timeout, cluster=settings.redis_cluster)
    from proxy.store.sqlite import SQLiteStore

    return SQLiteStore(settings.data_dir)


__all__ = ["Store", "StoreUnavailable", "open_store"]
