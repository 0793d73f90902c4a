"""The cache keep-alive (proxy.offload.cache_keepalive): one worker's keep-alive pings
(`KeepAlive`): a client's odd body never breaks the turn's aftermath, what is held stays within
its bytes, and one session's upstream never holds up the others' pings."""

from __future__ import annotations

import asyncio
import json
import time

import httpx2
import pytest

from proxy.core import prompt_cache as ka
from proxy.core.prompt_cache import LastSent, digest
from proxy.offload import cache_keepalive as last_sent
from proxy.offload.cache_keepalive import KeepAlive
from proxy.offload.records import TenantStore
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

LIMITS = ka.Limits(min_tokens=1000, max_pings=3, idle=900.0, ttl=300.0)
pytestmark = pytest.mark.anyio
PROMPT = [{"role": "user", "content": "a long task " * 4000}]


@pytest.fixture
async def tenant(tmp_path):
    store = SQLiteStore(tmp_path)
    yield TenantStore(store, "ns-a", 3600, Sealer(None))
    await store.close()


def sent(endpoint: str = "chat/completions") -> LastSent:
    return LastSent("d" * 32, tokens=50_000, at=time.time(), model="gpt-5", endpoint=endpoint)


@pytest.mark.parametrize("junk", ["lots", [1], {"n": 1}, 1.5, -(10**6), 10**12])
async def test_a_clients_own_output_field_is_not_what_a_ping_generates(tenant, junk):
    """A chat body carrying `max_output_tokens` (a Responses field) of any value: the chat ping
    asks `max_completion_tokens` 1, and that is what it may cost (a negative count would have let
    the pings past the write they avoid; a string raised after the turn)."""
    alive = KeepAlive(None, LIMITS, max_bytes=10**8)  # type: ignore[arg-type]  (no ping is sent here)
    body = {"model": "gpt-5", "messages": PROMPT, "max_output_tokens": junk}
    assert await alive.hold(tenant, "s1", sent=sent(), content=json.dumps(body).encode(), headers=[], base=None)
    assert alive._held[("ns-a", "s1")].held.output_tokens == 1


async def test_the_headers_held_count_against_the_bytes(tenant):
    """A session's headers (its credential and whatever else the client sent) are held with its
    body: a client sending large headers cannot hold more than `max_bytes` per worker."""
    body = json.dumps({"model": "gpt-5", "messages": PROMPT}).encode()
    headers = [(b"x-padding-%d" % i, b"x" * 8000) for i in range(8)]  # 64 KB
    alive = KeepAlive(None, LIMITS, max_bytes=len(body) + 100_000)  # type: ignore[arg-type]
    for session in ("s1", "s2"):
        await alive.hold(tenant, session, sent=sent(), content=body, headers=headers, base=None)
    assert len(alive) == 1 and alive.held_bytes <= len(body) + 100_000
    assert alive.held_bytes >= 64_000


class Upstream:
    """Answers each ping at once, but those of `hung` sessions' credential: held until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.sent: list[bytes] = []
        self.queries: list[bytes] = []

    async def send(self, method, path, *, headers, content, base=None, query=b"", record=None):
        credential = dict(headers)[b"authorization"]
        self.sent.append(credential)
        self.queries.append(query)
        if credential == b"Bearer hung":
            await self.release.wait()
        return httpx2.Response(200, json={"usage": {"prompt_tokens": 50_000, "completion_tokens": 1}})


async def test_a_ping_hung_upstream_holds_up_no_other_sessions_ping(tenant):
    """One session's upstream (a tenant's own, or one it chose) that never answers its ping must
    not hold back the pings of sessions due after it: they would miss their TTL (a ping's timeout
    is a minute, its lead before the TTL half that)."""
    now = [1_000_000.0]
    upstream = Upstream()
    alive = KeepAlive(upstream, LIMITS, max_bytes=10**8, clock=lambda: now[0])  # type: ignore[arg-type]
    body = json.dumps({"model": "gpt-5", "messages": PROMPT}).encode()
    for session, credential, at in (("hung", b"Bearer hung", now[0]), ("later", b"Bearer later", now[0] + 60)):
        record = LastSent(digest(body), tokens=50_000, at=at, model="gpt-5", endpoint="chat/completions")
        await last_sent.write(tenant, session, record)
        assert await alive.hold(
            tenant, session, sent=record, content=body, headers=[(b"authorization", credential)], base=None
        )
    alive.start()
    try:
        now[0] += LIMITS.ttl - LIMITS.lead + 1  # the first one's ping is due
        await asyncio.wait_for(_until(lambda: upstream.sent == [b"Bearer hung"]), 10)
        now[0] += 60  # and then the other's, while the first hangs
        await asyncio.wait_for(_until(lambda: b"Bearer later" in upstream.sent), 10)
    finally:
        upstream.release.set()
        await alive.stop()


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_a_ping_goes_where_its_turn_went_query_string_included(tenant):
    """Azure OpenAI names its API version in the query (`?api-version=…`): a ping without it is refused."""
    now = [1_000_000.0]
    upstream = Upstream()
    alive = KeepAlive(upstream, LIMITS, max_bytes=10**8, clock=lambda: now[0])  # type: ignore[arg-type]
    body = json.dumps({"model": "gpt-5", "messages": PROMPT}).encode()
    record = LastSent(digest(body), tokens=50_000, at=now[0], model="gpt-5", endpoint="chat/completions")
    await last_sent.write(tenant, "azure", record)
    assert await alive.hold(
        tenant,
        "azure",
        sent=record,
        content=body,
        headers=[(b"authorization", b"Bearer k")],
        base=None,
        query=b"api-version=2024-10-21",
    )
    alive.start()
    try:
        now[0] += LIMITS.ttl - LIMITS.lead + 1
        await asyncio.wait_for(_until(lambda: upstream.sent), 10)
    finally:
        await alive.stop()
    assert upstream.queries == [b"api-version=2024-10-21"]
