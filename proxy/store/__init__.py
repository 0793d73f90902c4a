"""Storage backends: Redis when a URL is configured, else the embedded SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from proxy.store.base import Store, StoreUnavailable
from proxy.store.sealing import Sealer


class StoreSettings(Protocol):
    """What opening the store reads of the server's settings (`proxy.config.ServerSettings`)."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def store_timeout(self) -> float: ...
    @property
    def redis_cluster(self) -> bool: ...
    @property
    def data_dir(self) -> Path: ...
    @property
    def encryption_key(self) -> str | None: ...
    @property
    def encryption_key_previous(self) -> str | None: ...
    @property
    def names_key(self) -> str | None: ...


def open_store(settings: StoreSettings) -> Store:
    if settings.redis_url:
        from proxy.store.redis import RedisStore

        return RedisStore(settings.redis_url, timeout=settings.store_timeout, cluster=settings.redis_cluster)
    from proxy.store.sqlite import SQLiteStore

    return SQLiteStore(settings.data_dir)


def sealer_for(settings: StoreSettings) -> Sealer:
    """Seals with --encryption-key, opens with it or --encryption-key-previous, keys names with
    --namespace-key (by default the encryption key)."""
    return Sealer(settings.encryption_key, previous=settings.encryption_key_previous, names=settings.names_key)


__all__ = ["Store", "StoreSettings", "StoreUnavailable", "open_store", "sealer_for"]
