"""The store as one tenant sees it: the store, the tenant's namespace, the content's TTL and
the sealer travel together (they were passed apart at every call), with the tenant's storage
quota when its writes are charged. Everything the proxy keeps for a tenant is reached from here."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.jsonio import JsonObject
from proxy.offload import records as events
from proxy.offload import records as response_chains
from proxy.offload.quota import Quota
from proxy.offload.records import CompactionRecords, RefStore
from proxy.store import Store
from proxy.store.sealing import Sealer


@dataclass(frozen=True)
class TenantStore:
    store: Store
    namespace: str
    ttl: int  # of everything stored for the tenant (`--store-ttl`)
    sealer: Sealer
    names_key: str | None = None  # keys the compaction tokens' tags (`ServerSettings.names_key`)
    quota: Quota | None = None  # admits (or refuses) every write of new content

    def refs(self) -> RefStore:
        """The offloaded content, by reference."""
        return RefStore(self.store, self.namespace, self.ttl, sealer=self.sealer, quota=self.quota)

    def records(self, api: str) -> CompactionRecords:
        """The emulated compactions' records of one API ("responses" or "messages")."""
        return CompactionRecords(
            self.store, self.namespace, self.ttl, sealer=self.sealer, secret=self.names_key, quota=self.quota, api=api
        )

    async def record_events(self, session: str | None, recorded: list[JsonObject]) -> None:
        await events.record(self.store, self.namespace, session, events=recorded, ttl=self.ttl, sealer=self.sealer)

    async def recent_events(self, session: str | None) -> list[JsonObject]:
        """Raises StoreUnavailable (a read the caller asked for)."""
        return await events.recent(self.store, self.namespace, session, sealer=self.sealer)

    async def resolve_chain(self, name: str) -> response_chains.Continuation | None:
        return await response_chains.resolve(self.store, self.namespace, name, ttl=self.ttl, sealer=self.sealer)

    async def remember_chain(self, name: str, continuation: response_chains.Continuation) -> None:
        await response_chains.remember(
            self.store, self.namespace, name, continuation=continuation, ttl=self.ttl, sealer=self.sealer
        )

    async def forget_chain(self, name: str) -> None:
        await response_chains.forget(self.store, self.namespace, name, sealer=self.sealer)

    def with_quota(self, quota: Quota | None) -> TenantStore:
        return TenantStore(self.store, self.namespace, self.ttl, self.sealer, self.names_key, quota)

    def __repr__(self) -> str:  # never the sealer's keys
        return f"TenantStore(namespace={self.namespace[:12]!r}, ttl={self.ttl})"
