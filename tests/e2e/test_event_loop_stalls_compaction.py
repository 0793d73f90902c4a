"""Work that grows with what a small request stands for stays off the event loop (issue 29,
points 4 and 5): a compressed body of a few hundred bytes inflating to tens of MB, an emulated
compaction of a large task, a small `input_tokens` carrying the token of a large record. Other
requests (`/healthz` here) are answered meanwhile: a loop held by the work (seconds of it)
would answer at most one before the work is done."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import brotli
import httpx2

from proxy.http import body as body_encoding
from tests.harness import responses as fake
from tests.harness.inflight import answered_while
from tests.harness.requests import post
from tests.harness.servers import scripted


def probed(url: str, work: Callable[[], None]) -> int:
    """How many /healthz were answered while `work` ran in another thread."""
    thread = threading.Thread(target=work)
    with httpx2.Client(timeout=60) as client:
        client.get(f"{url}/healthz")
        thread.start()
        answered = answered_while(thread.is_alive, lambda: client.get(f"{url}/healthz").raise_for_status(), pause=0.005)
    thread.join()
    return answered


def test_compressed_bodies_inflating_past_the_limit_are_inflated_off_the_loop(make_proxy, upstream, monkeypatch):
    inflated = b'{"model":"gpt-4o","messages":[{"role":"user","content":"' + b" " * (48 << 20) + b'"}]}'
    bomb = brotli.compress(inflated, quality=11)  # about 200 bytes
    assert len(bomb) < 1000
    calls: list[str] = []  # the thread of each decoder call
    real = body_encoding.DECODERS["br"]

    def spy(data, sink):
        for made in real(data, sink):
            calls.append(threading.current_thread().name)
            yield made

    monkeypatch.setitem(body_encoding.DECODERS, "br", spy)
    codes: list[int] = []

    def bombs() -> None:
        def one(path: str) -> None:
            r = post(url, f"/v1/{path}", body=bomb, key="sk-bomb", headers={"content-encoding": "br"}, timeout=120)
            codes.append(r.status_code)

        senders = [threading.Thread(target=one, args=(path,)) for path in ("offload", "chat/completions") * 3]
        for s in senders:
            s.start()
        for s in senders:
            s.join()

    with make_proxy(max_body_bytes=32 << 20) as url:
        answered = probed(url, bombs)
    assert codes == [413] * 6, codes
    on_loop = [name for name in calls if not name.startswith("offload-cpu")]
    # each body: its first pieces (under body_encoding.ON_LOOP_BYTES) on the loop, the other 32 MB in the pool
    assert len(on_loop) <= 6 * 2 and len(calls) - len(on_loop) >= 6 * 30, (len(on_loop), len(calls))
    assert answered >= 3, answered


def _large_task(mb: int) -> list[dict]:
    line = "a line of pasted log output with words, numbers 0123456789\n"
    return [
        {"role": "user", "content": "Task: fix what this log reports.\n" + line * (mb * 1024 * 1024 // len(line))},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
        {"role": "user", "content": "Go on."},
    ]


def test_an_emulated_compact_of_a_large_task_and_its_token_do_not_stall_the_loop(make_proxy, upstream):
    upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message("Hello")))  # and the summaries
    headers = {"authorization": "Bearer sk-large-task", "content-type": "application/json"}
    body = json.dumps({"model": "gpt-4o", "input": _large_task(12)}).encode()
    answers: dict[str, httpx2.Response] = {}

    def compact() -> None:
        answers["compact"] = httpx2.post(f"{url}/v1/responses/compact", content=body, headers=headers, timeout=120)

    def count() -> None:
        token = answers["compact"].json()["output"][-1]["encrypted_content"]
        small = json.dumps(
            {
                "model": "gpt-4o",
                "input": [{"type": "compaction", "encrypted_content": token}, {"role": "user", "content": "next"}],
            }
        ).encode()
        assert len(small) < 300
        answers["count"] = httpx2.post(f"{url}/v1/responses/input_tokens", content=small, headers=headers, timeout=120)

    with make_proxy() as url:
        during_compact = probed(url, compact)
        assert answers["compact"].status_code == 200, answers["compact"].text[:300]
        assert answers["compact"].json()["output"][0]["content"][0]["text"] == _large_task(12)[0]["content"]
        during_count = probed(url, count)
    assert answers["count"].status_code == 200, answers["count"].text[:300]
    forwarded = [r for r in upstream.requests if r.path.endswith("/input_tokens")][-1].json()["input"]
    assert forwarded[0]["content"] == _large_task(12)[0]["content"]  # the token expanded to what it stands for
    assert during_compact >= 3 and during_count >= 3, (during_compact, during_count)
