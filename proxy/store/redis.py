"""Redis store (redis-py asyncio). Many proxy processes share one Redis or one Redis Cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import TypeVar

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from proxy.store.base import StoreUnavailable

T = TypeVar("T")


# Compare-and-delete, compare-and-extend: one key each, so a script runs on its slot's node in a Cluster.
DELETE_IF = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
EXTEND_IF = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def is_cluster_url(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEMES)


class RedisStore:
    """Redis or Redis Cluster (`cluster=True`, or a redis+cluster:// URL).

    Every key of a tenant carries the namespace as a hash tag (`off:{ns}:…`), so the keys one
    request touches together live in one slot and pipelines never cross nodes.
    """

    def __init__(self, url: str, *, timeout: float = 2.0, cluster: bool = False) -> None:
        options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        self._ready = asyncio.Lock()
        self._initialized = False
        if cluster or is_cluster_url(url):
            url = url.replace("+cluster://", "://", 1)
            self.client = RedisCluster.from_url(url, **options)
        else:
            self._initialized = True
            self.client = redis.from_url(url, health_check_interval=30, retry_on_timeout=False, **options)

    async def _initialize(self) -> None:
        """A cluster client learns the slot map once, before concurrent use: redis-py's lazy
        initialisation races when many commands arrive at once (and may retry a SET NX that
        had in fact succeeded)."""
        async with self._ready:
            if not self._initialized:
                await self.client.initialize()
                self._initialized = True

    def _pipeline(self):
        if isinstance(self.client, RedisCluster):
            return self.client.pipeline()  # never transactional; keys of one call share a slot
        return self.client.pipeline(transaction=False)

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            if not self._initialized:
                await self._initialize()
            return await awaitable
        except (RedisError, RedisClusterException, OSError) as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        finally:
            if asyncio.iscoroutine(awaitable) and awaitable.cr_frame is not None and not awaitable.cr_running:
                awaitable.close()  # never awaited because initialisation failed

    async def put(self, key: str, value: bytes, ttl: int) -> None:
        await self._call(self.client.set(key, value, ex=ttl))

    async def put_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        return bool(await self._call(self.client.set(key, value, ex=ttl, nx=True)))

    async def get(self, key: str, ttl: int | None = None) -> bytes | None:
        if ttl is None:
            return await self._call(self.client.get(key))
        return await self._call(self.client.getex(key, ex=ttl))

    async def touch(self, keys: Sequence[str], ttl: int, *, slack: int = 0) -> list[bool]:
        if not keys:
            return []
        if slack <= 0:
            return await self._expire(keys, ttl)
        # Read-only first (PTTL: -2 missing, -1 no expiry); EXPIRE, which is written to the AOF
        # and the replicas, only for keys extended longer than `slack` seconds ago.
        async with self._pipeline() as pipe:
            for key in keys:
                pipe.pttl(key)
            remaining = await self._call(pipe.execute())
        alive = [r != -2 for r in remaining]
        due = [i for i, r in enumerate(remaining) if r == -1 or 0 <= r < (ttl - slack) * 1000]
        if due:
            for i, ok in zip(due, await self._expire([keys[i] for i in due], ttl)):
                alive[i] = ok  # a key that vanished in between counts as missing
        return alive

    async def _expire(self, keys: Sequence[str], ttl: int) -> list[bool]:
        async with self._pipeline() as pipe:
            for key in keys:
                pipe.expire(key, ttl)
            return [bool(r) for r in await self._call(pipe.execute())]

    async def delete(self, key: str) -> None:
        await self._call(self.client.delete(key))

    async def delete_if(self, key: str, value: bytes) -> bool:
        return bool(await self._call(self.client.eval(DELETE_IF, 1, key, value)))

    async def extend_if(self, key: str, value: bytes, ttl: int) -> bool:
        return bool(await self._call(self.client.eval(EXTEND_IF, 1, key, value, ttl)))

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
        return {m.decode() for m in await self._call(self.client.smembers(key))}

    async def push(self, key: str, value: bytes, *, max_len: int, ttl: int) -> None:
        async with self._pipeline() as pipe:
            pipe.rpush(key, value)
            pipe.ltrim(key, -max_len, -1)
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def items(self, key: str) -> list[bytes]:
        return list(await self._call(self.client.lrange(key, 0, -1)))

    async def incr(self, key: str, amount: int, ttl: int) -> int:
        async with self._pipeline() as pipe:
            pipe.incrby(key, amount)
            pipe.expire(key, ttl)
            value, _ = await self._call(pipe.execute())
            return int(value)

    async def incr_fields(self, key: str, amounts: Mapping[str, int | float], ttl: int) -> None:
        if not amounts:
            return
        async with self._pipeline() as pipe:
            for field, amount in amounts.items():
                if isinstance(amount, int):
                    pipe.hincrby(key, field, amount)
                else:
                    pipe.hincrbyfloat(key, field, amount)
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

    async def rank(self, key: str, member: str, score: float, ttl: int, *, drop_below: float | None = None) -> None:
        async with self._pipeline() as pipe:
            pipe.zadd(key, {member: score})
            if drop_below is not None:
                pipe.zremrangebyscore(key, "-inf", f"({drop_below}")
            pipe.expire(key, ttl)
            await self._call(pipe.execute())

    async def rank_add(self, key: str, amounts: Mapping[str, float], ttl: int) -> None:
        if not amounts:
            return
        async with self._pipeline() as pipe:
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


def _number(raw: bytes) -> int | float:
    """A hash field as HINCRBY / HINCRBYFLOAT left it: an int when it is one."""
    text = raw.decode()
    try:
        return int(text)
    except ValueError:
        return float(text)
