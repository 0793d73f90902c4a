"""The exchange (`proxy.turn.Exchange`) run with no transport at all: an explicit context (a
tenant's store, an admission, an upstream that answers from a script), its steps prepare →
send rounds → settle, and a transport-neutral answer."""

from __future__ import annotations

import json

import httpx2
import pytest

from proxy.core.settings import OffloadSettings
from proxy.formats.chat import CHAT
from proxy.offload.records import TenantStore
from proxy.offload.tenant import Admission, CredentialCheck, Quota
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.telemetry import RequestRecord
from proxy.turn import Exchange, ExchangeContext
from tests.harness.history import agent_history

pytestmark = pytest.mark.anyio
SETTINGS = OffloadSettings(mode="compact", max_total_tokens=2000, max_tool_message_tokens=500)


def completion(content: str = "done") -> dict:
    return {
        "id": "c1",
        "object": "chat.completion",
        "usage": {"prompt_tokens": 9, "completion_tokens": 1},
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
    }


class Scripted:
    """An upstream client that answers each request with the next response of a script."""

    def __init__(self, *answers: httpx2.Response) -> None:
        self.answers, self.sent = list(answers), []

    async def send(self, method, path, *, headers, content=None, base=None, query=b"", record=None):
        self.sent.append((method, path, json.loads(content) if content else None))
        if record is not None:
            record.upstream_left(0.0)
            record.upstream_answered(self.answers[0].status_code, 0.0)
        return self.answers.pop(0)


def no_summariser(body, settings, refs, *, background):
    return None


def headers(*, body_replaced: bool, emulating: bool) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer sk-test"), (b"replaced", str(body_replaced).encode())]


def context(tmp_path, upstream, check: CredentialCheck, record: RequestRecord | None = None) -> ExchangeContext:
    store = SQLiteStore(tmp_path)
    asked: list[int] = []

    async def ask() -> int | None:
        asked.append(1)
        return 200

    admission = Admission(check, "scope", ask)
    quota = Quota(store, "scope", limit=0, ttl=3600, admission=admission)
    return ExchangeContext(
        fmt=CHAT,
        tenant=TenantStore(store, "ns-exchange", 3600, Sealer(None), quota=quota),
        admission=admission,
        upstream=upstream,
        upstream_headers=headers,
        compressor=no_summariser,
        settings=SETTINGS,
        record=record,
    )


def exchange_of(ctx: ExchangeContext, body: dict) -> Exchange:
    return Exchange(ctx, raw=json.dumps(body).encode(), body=body, history=CHAT.history(body))


async def test_a_small_turn_is_prepared_sent_and_answered_as_the_upstream_answered(tmp_path):
    upstream, check, record = (
        Scripted(httpx2.Response(200, json=completion())),
        CredentialCheck(),
        RequestRecord("chat", "POST"),
    )
    exchange = exchange_of(
        context(tmp_path, upstream, check, record), {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    )
    turn = await exchange.prepare()
    assert turn.answers_as_is and exchange.headers == [(b"authorization", b"Bearer sk-test"), (b"replaced", b"False")]
    answer = await exchange.forward()
    assert answer.relayed and answer.status == 200 and answer.background is not None
    assert (b"x-offload-action", b"none") in answer.headers
    assert [path for _, path, _ in upstream.sent] == ["chat/completions"]
    assert exchange.sent is not None and exchange.sent.status == 200
    assert record.forwarded == exchange.sent.content and record.upstream_status == 200
    assert check.known("scope") is True  # the admission learnt what the upstream thinks of the key
    await answer.background()


async def test_the_reload_rounds_are_sent_by_the_exchange_and_the_body_comes_back_whole(tmp_path):
    upstream = Scripted(httpx2.Response(200, json=completion("all done")))
    check = CredentialCheck()
    body = {"model": "gpt-4o", "messages": agent_history(steps=4, lines=300)}
    exchange = exchange_of(context(tmp_path, upstream, check), body)
    turn = await exchange.prepare()
    assert turn.inject_reload_tools and turn.prepared.written  # stored: the admission settled first
    answer = await exchange.complete()
    assert answer.body is not None and json.loads(answer.body)["choices"][0]["message"]["content"] == "all done"
    assert (b"x-offload-reload-rounds", b"0") in answer.headers
    sent = upstream.sent[0][2]
    assert any(t["function"]["name"] == "context_reload" for t in sent["tools"])  # the round carried the tools
    await exchange.settle()
