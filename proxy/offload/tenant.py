"""A tenant's namespace in the store and what it may write there: the tenant's store keys
(`key`, `unsharded_key`), the bytes it stores counted against its quota (`Quota`, `WRITE_REFUSED`,
`refusal_warning`), and the credential's `Admission` (a caller not admitted stores nothing).

Each part's own account follows as the comment that opens its section.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence

from proxy.errors import Failure, Kind
from proxy.store import Store, StoreUnavailable

# Tenant namespaces: content offloaded under one identity is invisible to every other.
#
# A namespace is a hash of who the caller is (a tenant of the tenants file, a client credential,
# or "anonymous") and the optional sub-tenant (`X-Offload-Tenant`); raw credentials are never
# stored or logged.

NAMESPACE_VERSION = b"offload-ns-v2"
SHARDS = 256  # hash-tag shards per namespace: a large tenant's keys spread over every node of a cluster


def namespace_for(kind: str, identity: Sequence[str], sub_tenant: str | None, *, secret: str | None = None) -> str:
    """`identity`: the tenant name, or the credentials presented (order does not matter).

    With a `secret` (the names key: --namespace-key, else the encryption key) the hash is keyed: key names then reveal nothing that
    could be confirmed by guessing a tenant name or a credential.
    """
    material = b"\0".join(
        [
            NAMESPACE_VERSION,
            kind.encode(),
            *sorted(v.encode("utf-8", "surrogatepass") for v in set(identity)),
            b"\1",
            (sub_tenant or "").encode(),
        ]
    )
    if secret:
        keyed = hashlib.sha256(b"offload-ns-key\0" + secret.encode()).digest()
        return hmac.new(keyed, material, hashlib.sha256).hexdigest()[:32]
    return hashlib.sha256(material).hexdigest()[:32]


def bare_credential(value: str) -> str:
    """A credential without its `Bearer` scheme: `Bearer sk-x`, `bearer  sk-x` and `sk-x` are one."""
    value = value.strip()
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else value


def tenant_namespace(credential: str | None, tenant: str | None) -> str:
    """The namespace of a client credential (a bare key or an `Authorization` value)."""
    value = bare_credential(credential or "")
    return namespace_for("credential", [value] if value else [], tenant)


def key(namespace: str, kind: str, name: str) -> str:
    """Store key `off:{<namespace>:<shard>}:<kind>:<name>`.

    The braces are the Redis Cluster hash tag: the namespace (so the key still names its tenant,
    and no name a client chooses can pick the slot) and a shard, 2 hex digits of a CRC-32 of
    `<kind>:<name>`. A tenant's keys (and the all-tenant statistics, scope `all`, one shard per
    bucket) thus spread over up to 256 slots, i.e. every node; nothing the proxy does needs two
    keys in one slot (no MULTI/EXEC; its Lua scripts, a lease's release and renewal and the
    compare-and-set of a key rotation, read one key;
    its pipelines are non-transactional, a cluster pipeline sends each command to its node). The tag form is the key layout's version: the
    layout before it (`unsharded_key`, one slot per tenant) is read for compaction records only.
    """
    shard = zlib.crc32(f"{kind}:{name}".encode("utf-8", "surrogatepass")) % SHARDS
    return f"off:{{{namespace}:{shard:02x}}}:{kind}:{name}"


def unsharded_key(namespace: str, kind: str, name: str) -> str:
    """A key of the layout before the shards (`off:{<namespace>}:…`): read only where what it
    held cannot be made again (an emulated compaction's record: the client holds just the token)."""
    return f"off:{{{namespace}}}:{kind}:{name}"


# Who may make the proxy store content, and how much.
#
# Two checks admit new content before it is written:
#
# - **the storage quota** (`Quota.charge`, which only counts bytes) of the caller's tenant: bytes written, counted in the store (so every
#   worker and replica shares the count) in one counter per tenant whose idle TTL is the
#   content's: a safe upper bound of what the tenant holds, which starts again from 0 once the
#   tenant has been idle for a whole TTL. Sub-tenants (`X-Offload-Tenant`) share their tenant's
#   quota, so naming new ones buys nothing;
# - **the credential**, for callers whose key the proxy cannot vouch for (a client's own
#   provider key): the upstream must have accepted it recently (`CredentialCheck`), so an
#   invented key cannot use the proxy as free storage. The caller gate of the HTTP layer builds
#   the request's `Admission` (the status known, or how to ask: one `GET models`); a step that is
#   about to write new content settles it first (`RefStore.admit`, `CompactionRecords.admit`:
#   an explicit step, awaited once), and the store handle then refuses every write of a caller
#   not admitted (`CredentialRejected` from `Quota.charge`). A request that stores nothing asks
#   nothing; no store write makes an upstream call.

Ask = Callable[[], Awaitable[int | None]]


class QuotaExceeded(Failure):
    """Storing this would take the tenant past its quota; nothing was stored."""

    kind = Kind.QUOTA_EXCEEDED
    code = "storage_quota_exceeded"

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"storage quota of this credential exhausted ({used} of {limit} bytes used)")
        self.used, self.limit = used, limit


class CredentialRejected(Failure):
    """The upstream does not accept the caller's credential: nothing is stored for it."""

    kind = Kind.CREDENTIAL_REJECTED
    code = "invalid_api_key"

    def __init__(self) -> None:
        super().__init__("the upstream did not accept this credential, so nothing is stored for it")


# What a write of the proxy's may meet instead of success: a step that stores degrades on any of
# these (the request goes on, with `refusal_warning`); a route that only stores answers it
# (`proxy.http.error_map`).
WRITE_REFUSED: tuple[type[Exception], ...] = (StoreUnavailable, QuotaExceeded, CredentialRejected)


def refusal_warning(exc: Exception) -> str:
    """The warning of a write refused by one of `WRITE_REFUSED`."""
    return f"store unavailable ({exc})" if isinstance(exc, StoreUnavailable) else str(exc)


class Admission:
    """Whether one request's caller may make the proxy store content: built by the caller gate
    (`proxy.http.call_parts.admission_for`), settled (`settle`) by each step about to write.

    `check`, `scope`: the server's `CredentialCheck` and the credential's namespace; `ask`: the
    upstream's status for a request made with the credential (None: no answer), asked only
    when the check knows nothing recent. Without a check (a proxy key, the server's own key)
    the caller is admitted from the start."""

    def __init__(self, check: CredentialCheck | None = None, scope: str = "", ask: Ask | None = None) -> None:
        self.check, self.scope, self.ask = check, scope, ask

    @property
    def admitted(self) -> bool:
        """The check knows the credential accepted lately: a write may go on."""
        return self.check is None or self.check.known(self.scope) is True

    def learn(self, status: int) -> None:
        """What the upstream answered a request made with the credential (the check remembers it)."""
        if self.check is not None:
            self.check.remember(self.scope, status)

    async def settle(self) -> bool:
        """The credential's verdict: known to the check, else asked (`ask`, remembered by the
        check: asked once); an unanswered ask admits nothing and remembers nothing."""
        if self.check is None:
            return True
        known = self.check.known(self.scope)
        if known is None and self.ask is not None:
            status = await self.ask()
            if status is None:
                return False  # cannot tell now: store nothing, remember nothing
            self.check.remember(self.scope, status)
            known = self.check.known(self.scope)
        return bool(known)


ADMITTED = Admission()  # a caller the proxy vouches for (or a store not charged)


class Quota:
    def __init__(self, store: Store, scope: str, *, limit: int, ttl: int, admission: Admission = ADMITTED) -> None:
        """`scope`: the namespace of the tenant as a whole (sub-tenants included); `admission`:
        the request's (`Admission`), settled before a write (`admit`)."""
        self.store, self.limit, self.ttl, self.admission = store, limit, ttl, admission
        self.key = key(scope, "usage", "bytes")

    async def admit(self) -> None:
        """The step before a write of new content: the admission settled (may ask once)."""
        await self.admission.settle()

    async def charge(self, nbytes: int) -> None:
        """Count `nbytes` about to be written, or raise (and count nothing): CredentialRejected
        for a caller not admitted (`admit` not awaited, or refused), QuotaExceeded past the limit."""
        if not self.admission.admitted:
            raise CredentialRejected()
        if self.limit <= 0 or nbytes <= 0:
            return
        used = await self.store.incr(self.key, nbytes, self.ttl)
        if used > self.limit:
            await self.store.incr(self.key, -nbytes, self.ttl)
            raise QuotaExceeded(used - nbytes, self.limit)


SILENT = (429,)  # with the 5xx: answers an upstream gives whatever the credential


class CredentialCheck:
    """Remembers, per credential namespace, whether the upstream accepted it lately.

    A credential is accepted when the upstream answered a request made with it with anything
    but 401/403, refused on 401/403; an answer that tells nothing of the credential (429, a
    5xx: the upstream overloaded or failing) is not remembered. One `GET models` with the
    credential is asked when nothing recent is known.
    """

    def __init__(self, ttl: float = 600.0, size: int = 10_000) -> None:
        self.ttl, self.size = ttl, size
        self._known: dict[str, tuple[float, bool]] = {}

    def known(self, scope: str) -> bool | None:
        entry = self._known.get(scope)
        if entry is None or time.monotonic() - entry[0] > self.ttl:
            return None
        return entry[1]

    def remember(self, scope: str, status: int) -> None:
        """Note what the upstream answered a request made with this credential (nothing, for
        an answer that tells nothing of it: `SILENT`)."""
        if status in SILENT or status >= 500:
            return
        if len(self._known) >= self.size:
            self._known.clear()
        self._known[scope] = (time.monotonic(), status not in (401, 403))
