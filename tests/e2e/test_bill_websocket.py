"""The bill over the Responses WebSocket mode: turns on one connection of the openai SDK's own
client (`client.responses.connect()`, unchanged), billed by the fake upstream's prompt cache
(`tests.harness.billing`, on a clock the test moves), show in the statistics as HTTP turns do —
the tenant's and the session's bill the fake's, each turn's row its own answer's, the usage the
client read the one the upstream reported — and a conversation continued over HTTP after the
connection closed is one session, billed alike."""

from __future__ import annotations

import uuid

import openai
import pytest

from tests.e2e.test_bill_simulated import GAPS, SYSTEM
from tests.harness import bill_checks as checks
from tests.harness.billing import ProviderCaches

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def until_done(connection):
    for event in connection:
        assert event.type != "error", event
        if event.type == "response.completed":
            return event.response
    raise AssertionError("the connection closed before the response finished")


def test_websocket_turns_are_billed_and_shown_like_http_ones(proxy_url, upstream, caches: ProviderCaches, key):
    session = f"ws-bill-{uuid.uuid4().hex[:12]}"
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=60)
    items: list[dict] = []  # the conversation as the client holds it
    with client.responses.connect(extra_headers={"X-Offload-Session": session}) as connection:
        previous = None
        for turn, gap in enumerate(GAPS):  # three turns on the connection, each continuing the last
            asked = user(f"Why did the deploy stop? ({turn})")
            connection.response.create(
                model="gpt-5",
                instructions=SYSTEM,
                input=[asked],
                store=False,
                **({"previous_response_id": previous} if previous else {}),
            )
            response = until_done(connection)
            billed = caches.of(key)[-1].billed
            assert (response.usage.input_tokens, response.usage.input_tokens_details.cached_tokens) == (
                billed.total,
                billed.read,
            )
            previous = response.id
            items += [asked, *(item.model_dump(exclude_none=True) for item in response.output)]
            caches.clock.advance(gap)
    # the next turn over HTTP, the whole history sent (as a client does after a reconnect)
    reply = client.responses.create(
        model="gpt-5",
        instructions=SYSTEM,
        input=[*items, user("And now?")],
        store=False,
        extra_headers={"X-Offload-Session": session},
    )
    assert reply.usage.input_tokens == caches.of(key)[-1].billed.total

    sent = [r.json() for r in upstream.responses_requests()]
    assert len(sent) == 4 and all(body["stream"] for body in sent[:3])  # the WebSocket's turns go as SSE
    assert [len(body["input"]) for body in sent[:3]] == [1, 3, 5]  # the connection's history, expanded
    reads = [b.billed.read for b in caches.of(key)]
    assert reads[0] == 0 and reads[1] >= 1024 and reads[2] == 0 and reads[3] >= 1024, reads  # the gap: expired

    shown = checks.assert_shown(proxy_url, key, session, caches.of(key), model="gpt-5", turns=4)
    assert [row["transport"] for row in shown["data"]] == ["websocket"] * 3 + ["http"]
    for row, bill in zip(shown["data"], checks.of_call(caches.of(key), "turn")):
        checks.assert_turn_billed(row, [bill])


def test_turns_on_two_connections_of_two_tenants_are_billed_apart(proxy_url, upstream, caches: ProviderCaches):
    """Each tenant's bill is its own connection's: the fake's cache is per credential, the
    statistics per tenant."""
    keys = [f"sk-{uuid.uuid4().hex}" for _ in range(2)]
    clients = [openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=k, max_retries=0, timeout=60) for k in keys]
    with clients[0].responses.connect() as one, clients[1].responses.connect() as two:
        for turn in range(2):
            for connection, n in ((one, 1), (two, 3)):  # the second tenant's turns: three times the input
                connection.response.create(
                    model="gpt-5", instructions=SYSTEM * n, input=[user(f"turn {turn}")], store=False
                )
                until_done(connection)
            caches.clock.advance(10)
    for k in keys:
        bills = caches.of(k)
        assert len(bills) == 2 and bills[1].billed.read >= 1024
        totals = checks.totals(proxy_url, k, checks.answers(2))
        assert totals["requests"] == 2
        checks.assert_billed(totals["bill"], bills, "gpt-5")
    assert caches.of(keys[1])[0].billed.total > 2 * caches.of(keys[0])[0].billed.total
