"""The WebSocket mode and the emulated compaction_trigger on a fleet: two replicas on one Redis.

A conversation compacted over the WebSocket on one replica goes on over HTTP on the other (the
compaction item's record is in the shared store: the other replica expands it, and the upstream
sees the summary, never the item or its token); the same history sent to both replicas is
forwarded byte for byte alike (folds and offloads are decided from the history alone); a Redis
restart between turns fails no WebSocket turn on either replica.
"""

from __future__ import annotations

import pytest

from proxy.core.compaction import ANY_VERSION, PREFIX
from tests.e2e.test_responses_compaction_trigger import (
    DEVELOPER,
    HISTORY,
    MODEL,
    RELOAD,
    TASK,
    TRIGGER,
    model,  # noqa: F401 (the fake model)
)
from tests.harness import responses as fake
from tests.harness.fleet import replicas
from tests.harness.requests import post
from tests.harness.responses import user_message as user
from tests.harness.servers import SNAPSHOT
from tests.harness.websocket import Socket, completed, texts

pytestmark = [pytest.mark.usefixtures("fresh_summary_memory")]


@pytest.fixture
def fleet(upstream, private_redis):
    with replicas(2, "--redis-url", private_redis.url, "--upstream", f"{upstream.url}/v1") as procs:
        yield [p.url for p in procs]


def test_compacted_over_the_websocket_on_one_replica_goes_on_over_http_on_the_other(
    fleet, upstream, private_redis, key
):
    first, second = fleet
    with Socket(first, key, headers=RELOAD, timeout=60) as ws:
        compacted = completed(ws.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False))
    [item] = compacted["output"]
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(PREFIX)
    assert not upstream.responses_requests()

    answer = post(
        second,
        "/v1/responses",
        key=key,
        headers=RELOAD,
        body={"model": MODEL, "store": False, "input": [DEVELOPER, TASK, HISTORY[5], item, user("go on")]},
    )
    assert answer.status_code == 200, answer.text
    [sent] = upstream.responses_requests()
    assert ANY_VERSION.encode() not in sent.body and b"compaction" not in sent.body
    items = fake.input_items(sent)
    assert items[:2] == [DEVELOPER, TASK] and SNAPSHOT in items[2]["content"][0]["text"]
    assert items[3:] == [HISTORY[5], user("go on")]

    # the same history to both replicas: the same forwarded bytes
    for url in fleet:
        assert (
            post(
                url,
                "/v1/responses",
                key=key,
                headers=RELOAD,
                body={"model": MODEL, "store": False, "input": [*HISTORY, user("again")]},
            ).status_code
            == 200
        )
    a, b = upstream.responses_requests()[-2:]
    assert a.body == b.body

    # Redis restarts between turns: no WebSocket turn fails on either replica
    private_redis.restart()
    for url in fleet:
        with Socket(url, key, headers=RELOAD, timeout=60) as ws:
            assert texts(completed(ws.create(model=MODEL, input=[user("after the restart")], store=False))) == [
                "an answer that is no compaction"
            ]
