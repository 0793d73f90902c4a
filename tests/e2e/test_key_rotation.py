"""A key rotation loses nothing a conversation still uses: a summary made under the old key,
read during the rotation (--encryption-key new, --encryption-key-previous old), is still used
once the previous key is dropped — the same forwarded bytes, no new summary call — and so are
the events and the session's turns recorded before it; on the embedded store and on Redis."""

from __future__ import annotations

import json
import time

import httpx2
import pytest

from tests.e2e.test_background_summaries import BACKGROUND, SNAPSHOT, gated_summaries
from tests.e2e.test_compression_e2e import chat_history, forwarded
from tests.harness.requests import post

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

OLD, NEW = "the encryption key before the rotation", "the encryption key after the rotation"
SESSION = BACKGROUND["X-Offload-Session"]


@pytest.fixture(params=["sqlite", "redis"])
def store_options(request, tmp_path) -> dict:
    """Where the three proxies of a test keep their content: one store, outliving each of them."""
    if request.param == "sqlite":
        return {"data_dir": tmp_path}
    return {"redis_url": request.getfixturevalue("private_redis_url")}


def turn(url: str, key: str, messages: list[dict], headers: dict) -> httpx2.Response:
    reply = post(url, json={"model": "gpt-4o", "messages": messages}, key=key, headers=headers, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply


def session_turns(url: str, key: str, expected: int) -> int:
    """The turns the session's statistics hold, once the recorder has written `expected` (or 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        reply = httpx2.get(f"{url}/v1/offload/sessions/{SESSION}", headers={"authorization": f"Bearer {key}"})
        kept = reply.json().get("turns_kept", 0) if reply.status_code == 200 else 0
        if kept >= expected or time.monotonic() > deadline:
            return kept
        time.sleep(0.1)


def test_what_a_conversation_uses_survives_the_rotation(make_proxy, upstream, store_options, key):
    upstream.handler, calls = gated_summaries()
    history = chat_history(12)
    later = history + [{"role": "assistant", "content": "Final answer"}, {"role": "user", "content": "More?"}]
    with make_proxy(encryption_key=OLD, **store_options) as url:  # the summary, made inline, under OLD
        reply = turn(url, key, history, {**BACKGROUND, "X-Offload-Hard-Max-Tokens": "1"})
        assert reply.headers["x-offload-action"] == "compress" and len(calls) == 1

    rotating = {"encryption_key": NEW, "encryption_key_previous": OLD, "namespace_key": OLD}
    with make_proxy(**rotating, **store_options) as url:
        assert turn(url, key, later, BACKGROUND).headers["x-offload-action"] == "compress"
        during = forwarded(upstream)[-1]
        assert SNAPSHOT in during[2]["content"] and len(calls) == 1

    with make_proxy(encryption_key=NEW, namespace_key=OLD, **store_options) as url:  # the previous key dropped
        assert turn(url, key, later, BACKGROUND).headers["x-offload-action"] == "compress"
        assert forwarded(upstream)[-1] == during  # the same summary, byte for byte
        assert len(calls) == 1  # no summary made again
        ref = during[2]["content"].split("ref=")[1].split(".")[0]
        stored = httpx2.get(f"{url}/v1/offload/{ref}", headers={"authorization": f"Bearer {key}"})
        assert stored.status_code == 200  # what the summary covers, still reloadable
        assert [json.loads(line) for line in stored.json()["content"].splitlines()] == history[2:-2]
        events = httpx2.get(
            f"{url}/v1/offload/events", params={"session": SESSION}, headers={"authorization": f"Bearer {key}"}
        ).json()["data"]
        assert [e["type"] for e in events].count("compression") == 1  # the first turn's, recorded under OLD
        assert session_turns(url, key, 3) == 3  # the first turn's statistics too
