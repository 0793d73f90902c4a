"""Redis store (redis-py asyncio). Many proxy processes share one Redis or one Redis Cluster."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import types
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, TypeVar

import redis.asyncio as redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
)
from redis.maint_notifications import MaintNotificationsConfig

from proxy.store.base import StoreUnavailable

log = logging.getLogger("proxy.store.redis")

T = TypeVar("T")


# Compare-and-delete, compare-and-extend (a lease), compare-and-set (a value sealed again): one key each,
# so a script runs on its slot's node in a Cluster; sending one again applies nothing twice.
DELETE_IF = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
EXTEND_IF = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"
# (Keeping the expiry; in a list, each item equal to one of the old values is replaced in place.)
REPLACE_IF = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[1], ARGV[2], 'KEEPTTL') return 1 end return 0"
)
REPLACE_ITEMS = """
local new = {}
for i = 1, #ARGV, 2 do new[ARGV[i]] = ARGV[i + 1] end
local replaced = 0
for i, item in ipairs(redis.call('lrange', KEYS[1], 0, -1)) do
  if new[item] then redis.call('lset', KEYS[1], i - 1, new[item]) replaced = replaced + 1 end
end
return replaced
"""

# One command for many keys on a single Redis (never on a cluster: its keys span slots): a
# single-key command on each key of KEYS, its answers in order (PTTL; EXPIRE: 1 set, 0 missing).
# A pipeline of a command per key costs the client its packing and parsing per key: 2.3 ms of CPU
# for the 237 refs a steady turn of a 1M-token history touches, 0.6 ms as one script (issue 42).
EACH = {
    command: f"local r = {{}} for i, k in ipairs(KEYS) do r[i] = redis.call('{command}', k, unpack(ARGV)) end return r"
    for command in ("pttl", "expire")
}
EACH_KEYS = 1000  # keys per script call: one call holds the server for its keys' commands only

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
RETRIES = 2  # a command failing with a connection error is sent again this many times at most
CLUSTER_RETRIES = 1  # on a cluster (whose pipelines also retry timeouts, after 0.25 s: redis-py's rule)
RETRY_BASE = 0.01  # backoff before retry n: RETRY_BASE * 2**n seconds, capped (below)
HEALTH_CHECK_EVERY = 10  # seconds: a pooled connection idle longer is PINGed before its next command
ALWAYS = 0.001  # a health check interval that PINGs before every command (a connection is never this idle)


def is_cluster_url(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEMES)


class RedisStore:
    """Redis or Redis Cluster (`cluster=True`, or a redis+cluster:// URL).

    A tenant's keys spread over many slots (`proxy.offload.tenant.key`): the pipelines here are
    never transactional and hold single-key commands only, so on a cluster each command goes to
    its own node (one round trip per node, in parallel) and no operation needs two keys in one slot.
    """

    def __init__(self, url: str, *, timeout: float = 2.0, cluster: bool = False) -> None:
        self._ready = asyncio.Lock()
        self._initialized = False
        self._per_key = False  # the server refused the touch script: a command per key (`_each`)
        self.client: redis.Redis | RedisCluster
        self._once: redis.Redis | RedisCluster
        if cluster or is_cluster_url(url):
            url = url.replace("+cluster://", "://", 1)
            self.client = _Cluster.from_url(url, **connection_options(timeout, cluster=True))
            self._once = _Cluster.from_url(url, **connection_options(timeout, retry=False, cluster=True))
        else:
            self._initialized = True
            self.client = redis.from_url(url, **connection_options(timeout))
            self._once = redis.from_url(url, **connection_options(timeout, retry=False))

    async def _initialize(self) -> None:
        """A cluster client learns the slot map once, before concurrent use: redis-py's lazy
        initialisation races when many commands arrive at once (and may retry a SET NX that
        had in fact succeeded)."""
        async with self._ready:
            if not self._initialized:
                await self.client.initialize()
                await self._once.initialize()
                self._initialized = True

    @contextlib.asynccontextmanager
    async def _pipeline(self, *, once: bool = False) -> AsyncIterator[Pipeline | ClusterPipeline]:
        """A pipeline; `once`: of commands that must not be sent twice (see `connection_options`).
        A cluster pipeline reads the slot map again on entering after a failure: that failing is
        the store being unavailable too."""
        client = self._once if once else self.client
        try:
            if not self._initialized:
                await self._initialize()
            # never transactional: each command goes to its key's node
            pipeline = client.pipeline() if isinstance(client, RedisCluster) else client.pipeline(transaction=False)
            async with pipeline as pipe:
                yield pipe
        except (RedisError, RedisClusterException, OSError, AttributeError) as exc:  # AttributeError: see _Cluster
            raise StoreUnavailable(f"redis: {exc!r}") from exc

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            if not self._initialized:
                await self._initialize()
            return await awaitable
        except (RedisError, RedisClusterException, OSError, AttributeError) as exc:  # AttributeError: see _Cluster
            raise StoreUnavailable(f"redis: {exc!r}") from exc
        finally:
            if (
                isinstance(awaitable, types.CoroutineType)
                and awaitable.cr_frame is not None
                and not awaitable.cr_running
            ):
                awaitable.close()  # never awaited because initialisation failed

    async def put(self, key: str, value: bytes, ttl: int) -> None:
        await self._call(self.client.set(key, value, ex=ttl))

    async def put_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        return bool(await self._call(self._once.set(key, value, ex=ttl, nx=True)))  # a lock: never resent

    async def get(self, key: str, ttl: int | None = None) -> bytes | None:
        raw = await self._call(self.client.get(key) if ttl is None else self.client.getex(key, ex=ttl))
        return raw.encode() if isinstance(raw, str) else raw  # bytes: the clients do not decode replies

    async def touch(self, keys: Sequence[str], ttl: int, *, slack: int = 0) -> list[bool]:
        if not keys:
            return []
        if slack <= 0:
            return await self._expire(keys, ttl)
        # Read-only first (PTTL: -2 missing, -1 no expiry); EXPIRE, which is written to the AOF
        # and the replicas, only for keys extended longer than `slack` seconds ago.
        remaining = await self._each("pttl", keys)
        alive = [r != -2 for r in remaining]
        due = [i for i, r in enumerate(remaining) if r == -1 or 0 <= r < (ttl - slack) * 1000]
        if due:
            for i, ok in zip(due, await self._expire([keys[i] for i in due], ttl)):
                alive[i] = ok  # a key that vanished in between counts as missing
        return alive

    async def _expire(self, keys: Sequence[str], ttl: int) -> list[bool]:
        return [bool(r) for r in await self._each("expire", keys, ttl)]

    async def _each(self, command: str, keys: Sequence[str], *args: int) -> list[int]:
        """A single-key command of `EACH` on each key, its answers in order: on a single Redis one
        script call per `EACH_KEYS` keys, on a cluster a command per key (each to its slot's node).
        A server that refuses the script (a sharding proxy in front of a `redis://` URL: CROSSSLOT;
        a user without `@scripting`: NOPERM) gets a command per key, from then on. Safe to send
        again (a read, or an expiry set again)."""
        if not self._per_key and not isinstance(self.client, RedisCluster):
            try:
                async with self._pipeline() as pipe:
                    for start in range(0, len(keys), EACH_KEYS):
                        batch = keys[start : start + EACH_KEYS]
                        pipe.eval(EACH[command], len(batch), *batch, *args)
                    return [int(r) for answers in await self._call(pipe.execute()) for r in answers]
            except StoreUnavailable as exc:
                if not isinstance(exc.__cause__, ResponseError):
                    raise
                self._per_key = True
                log.warning("redis refused a touch script (%s): a command per key from now on", exc.__cause__)
        async with self._pipeline() as pipe:
            for key in keys:
                pipe.execute_command(command.upper(), key, *args)
            return [int(r) for r in await self._call(pipe.execute())]

    async def delete(self, key: str) -> None:
        await self._call(self.client.delete(key))

    async def delete_if(self, key: str, value: bytes) -> bool:
        return bool(await self._call(self.client.eval(DELETE_IF, 1, key, value)))

    async def extend_if(self, key: str, value: bytes, ttl: int) -> bool:
        return bool(await self._call(self.client.eval(EXTEND_IF, 1, key, value, ttl)))

    async def replace_if(self, key: str, expected: bytes, value: bytes) -> bool:
        return bool(await self._call(self.client.eval(REPLACE_IF, 1, key, expected, value)))

    async def add_members(self, key: str, members: Sequence[str], ttl: int, *, slack: int = 0) -> None:
        if not members:
            return
        if slack > 0:  # read-only first: write only what is missing, or an expiry that is due
            async with self._pipeline() as pipe:
                pipe.smismember(key, list(members))
                pipe.pttl(key)
                flags, remaining = await self._call(pipe.execute())
            members = [m for m, present in zip(members, flags) if not present]
            due = remaining == -1 or 0 <= remaining < (ttl - slack) * 1000
            if not members and not due:
                return
        async with self._pipeline() as pipe:
            if members:
                pipe.sadd(key, *members)
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def members(self, key: str) -> set[str]:
        return {m.decode() if isinstance(m, bytes) else m for m in await self._call(self.client.smembers(key))}

    async def push(self, key: str, value: bytes, *, max_len: int, ttl: int) -> None:
        async with self._pipeline(once=True) as pipe:
            pipe.rpush(key, value)
            pipe.ltrim(key, -max_len, -1)
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def items(self, key: str) -> list[bytes]:
        return [m.encode() if isinstance(m, str) else m for m in await self._call(self.client.lrange(key, 0, -1))]

    async def replace_items(self, key: str, replacements: Mapping[bytes, bytes]) -> int:
        if not replacements:
            return 0
        pairs = [part for old_new in replacements.items() for part in old_new]
        return int(await self._call(self.client.eval(REPLACE_ITEMS, 1, key, *pairs)))

    async def incr(self, key: str, amount: int, ttl: int) -> int:
        async with self._pipeline(once=True) as pipe:
            pipe.incrby(key, amount)
            pipe.expire(key, ttl)
            value, _ = await self._call(pipe.execute())
            return int(value)

    async def incr_fields(self, key: str, amounts: Mapping[str, int | float], ttl: int) -> None:
        if not amounts:
            return
        async with self._pipeline(once=True) as pipe:
            for field, amount in amounts.items():
                if isinstance(amount, int):
                    pipe.hincrby(key, field, amount)
                else:
                    pipe.hincrbyfloat(key, field, amount)
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def set_fields(
        self, key: str, values: Mapping[str, int | float], ttl: int, *, only_new: bool = False
    ) -> None:
        if not values:
            return
        async with self._pipeline(once=True) as pipe:
            if only_new:
                for field, value in values.items():
                    pipe.hsetnx(key, field, value)
            else:
                # (redis-py types `mapping` with its own key union, and a Mapping's key is invariant:
                # no dict[str, ...] matches it)
                pipe.hset(key, mapping=dict(values))  # type: ignore[arg-type]
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def hashes(self, keys: Sequence[str]) -> list[dict[str, int | float]]:
        if not keys:
            return []
        async with self._pipeline() as pipe:  # a cluster pipeline sends each key to its node
            for key in keys:
                pipe.hgetall(key)
            found = await self._call(pipe.execute())
        return [{f.decode(): _number(v) for f, v in fields.items()} for fields in found]

    async def rank(self, key: str, member: str, score: float, *, ttl: int, drop_below: float | None = None) -> None:
        async with self._pipeline() as pipe:
            pipe.zadd(key, {member: score})
            if drop_below is not None:
                pipe.zremrangebyscore(key, "-inf", f"({drop_below}")
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def rank_add(self, key: str, amounts: Mapping[str, float], ttl: int) -> None:
        if not amounts:
            return
        async with self._pipeline(once=True) as pipe:
            for member, amount in amounts.items():
                pipe.zincrby(key, amount, member)
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def ranked(self, key: str, offset: int, limit: int) -> tuple[int, list[tuple[str, float]]]:
        if limit <= 0:  # ZREVRANGE 0 -1 would be the whole set
            return int(await self._call(self.client.zcard(key))), []
        async with self._pipeline() as pipe:
            pipe.zcard(key)
            pipe.zrevrange(key, offset, offset + limit - 1, withscores=True)
            total, page = await self._call(pipe.execute())
        return int(total), [(m.decode(), float(s)) for m, s in page]

    async def ping(self) -> bool:
        try:
            return bool(await self._call(self.client.ping()))
        except StoreUnavailable:
            return False

    async def close(self) -> None:
        await self.client.aclose()
        await self._once.aclose()


class _Cluster(RedisCluster):
    """A cluster client that re-sends a command after a connection error (a node restarted,
    its pooled connections are stale: the slot map is read again first) or while the cluster
    heals, never after a timeout: a hung node would hold every call for a timeout per attempt.
    (Cluster pipelines follow redis-py's own rule, timeouts included: `CLUSTER_RETRIES`.)"""

    # AttributeError: redis-py's node connection whose writer its failed health-check PING closed
    # under it (a node restarting; redis-py 8.1): nothing was written on that attempt, so the
    # resend, on a new connection, applies nothing twice
    # (redis-py types this tuple as its own four classes: an override with others cannot match it)
    ERRORS_ALLOW_RETRY = (ConnectionError, ClusterDownError, SlotNotCoveredError, AttributeError)  # type: ignore[assignment]


def connection_options(timeout: float, *, retry: bool = True, cluster: bool = False) -> dict[str, Any]:
    """The client options: what survives a Redis restart, and what stays bounded in an outage.

    - Maintenance notifications off: with them on (redis-py 8's default on RESP3, "auto"), the
      pool no longer checks a pooled connection for the server's close before handing it out
      (redis/redis-py#4252), so after a restart every pooled connection failed once.
    - Connections idle over `HEALTH_CHECK_EVERY` s are PINGed before reuse.
    - `retry`: a command failing with a connection error (reset, refused, closed by the server)
      is sent again up to `RETRIES` times after an exponential backoff (`RETRY_BASE` doubling,
      capped at a fifth of the timeout: 0.06 s in all with the default 0.5 s), on a fresh
      connection. A timeout is never retried: a hung Redis is the guarded store's to skip
      (`proxy.store.guarded`), each retry would add a whole timeout to the request.
    - `retry=False` for the commands a second delivery would apply twice (INCRBY, HINCRBY,
      HINCRBYFLOAT, ZINCRBY, RPUSH, SET NX as a lock): a connection error after the command was
      sent says nothing of whether Redis ran it. Standalone, they are never resent: the pool's
      check finds a connection the server closed before it is used. A cluster node's pool has
      no such check, so there (`cluster`) every such command is preceded by a PING on its
      connection, and resent only after a connection error (the PING's, in practice: a node
      that dies between the PING and the command is the one case that may apply it twice).
    """
    backoff = ExponentialBackoff(cap=min(0.1, timeout / 5), base=RETRY_BASE)
    resend = retry or cluster
    retries = CLUSTER_RETRIES if cluster else RETRIES
    policy = Retry(backoff, retries, supported_errors=(ConnectionError,)) if resend else Retry(NoBackoff(), 0)
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": policy,
        "health_check_interval": HEALTH_CHECK_EVERY if retry else ALWAYS if cluster else 0,
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
    }


def _number(raw: bytes) -> int | float:
    """A hash field as HINCRBY / HINCRBYFLOAT left it: an int when it is one."""
    text = raw.decode()
    try:
        return int(text)
    except ValueError:
        return float(text)
