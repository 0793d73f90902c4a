"""The Responses WebSocket mode, attacked: event fields of other JSON types, upgrade headers that
must not reach the upstream, refusals at the upgrade as HTTP refuses the request, one
connection's or credential's responses out of another's reach, memory a client could make the
connection hold (waiting creates, held responses), connections dying abnormally."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from websockets.exceptions import InvalidStatus

from tests.harness.responses import answer, message
from tests.harness.servers import default_handler, held_back, is_responses_create, scripted
from tests.harness.websocket import Socket, completed, texts


@pytest.mark.parametrize("kind", [["response.create"], {"a": 1}, 7, None, True, 1.5])
def test_a_type_of_another_json_type_is_an_error_event(proxy_url, upstream, kind):
    with Socket(proxy_url) as ws:
        ws.send({"type": kind, "input": "x"})
        error = ws.recv()
        assert (error["type"], error["status"], error["error"]["code"]) == ("error", 400, "unknown_event_type")
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]


@pytest.mark.parametrize(
    "frame", ["null", "7", '"response.create"', "[]", "true", "1e999", '{"type": "response.create"']
)
def test_a_frame_of_another_json_type_is_an_error_event(proxy_url, upstream, frame):
    with Socket(proxy_url) as ws:
        ws.send(frame)
        error = ws.recv()
        assert error["type"] == "error" and error["status"] == 400
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]


@pytest.mark.parametrize(
    "previous, stores",
    [
        (["resp_x"], (False, True)),
        ({"id": "resp_x"}, (False, True)),
        (7, (False, True)),
        (True, (False, True)),
        ("", (False,)),
        ("x" * 100_000, (False,)),  # a string with store true goes on as over HTTP
    ],
)
def test_a_previous_response_id_of_another_type_is_a_clear_error(proxy_url, upstream, previous, stores):
    with Socket(proxy_url) as ws:
        for store in stores:
            [error] = ws.create(input="x", store=store, previous_response_id=previous)
            assert error["type"] == "error" and error["status"] == 400, error
            assert len(error["error"]["message"]) < 2000
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]
    assert [r.json()["input"] for r in upstream.responses_requests()] == ["still here"]


def test_the_upgrade_headers_do_not_reach_the_upstream(proxy_url, upstream):
    with Socket(proxy_url, headers={"OpenAI-Beta": "responses_websockets=2026-02-06", "X-Custom": "kept"}) as ws:
        completed(ws.create(input="hi"))
    [sent] = upstream.responses_requests()
    names = {name for name, _ in sent.header_list}
    assert not names & {
        "upgrade",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
    }
    assert sent.headers.get("connection", "").lower() != "upgrade"
    assert sent.headers["x-custom"] == "kept"
    # the beta that names the client's transport to the proxy is not the HTTP request's
    assert "responses_websockets" not in sent.headers.get("openai-beta", "")


def test_a_bad_offload_header_refuses_the_upgrade_as_http_refuses_the_request(proxy_url, upstream, client):
    headers = {"X-Offload-Mode": "no-such-mode"}
    over_http = client.with_options(default_headers=headers).responses.with_raw_response
    with pytest.raises(Exception) as http_refusal:
        over_http.create(model="gpt-5", input="hi")
    status = http_refusal.value.status_code  # type: ignore[attr-defined]
    with pytest.raises(InvalidStatus) as refused:
        Socket(proxy_url, headers=headers)
    assert refused.value.response.status_code == status == 400
    assert json.loads(refused.value.response.body)["error"]["param"]


# ---------------------------------------------------------------- memory a client makes the connection hold


def test_held_responses_hold_at_most_max_body_bytes_together(make_proxy, upstream):
    """16 unrelated responses of 50 MB each would be 800 MB held by one connection for its idle
    timeout: what the connection holds is bounded by --max-body-bytes too, the oldest forgotten."""
    with make_proxy(max_body_bytes=8192) as url, Socket(url) as ws:
        ids = [completed(ws.create(input=text * 3000, store=False))["id"] for text in "abc"]
        [error] = ws.create(input="more", store=False, previous_response_id=ids[0])
        assert (error["status"], error["error"]["code"]) == (400, "previous_response_not_found")
        assert texts(completed(ws.create(input="more", store=False, previous_response_id=ids[-1]))) == ["Hello there"]
    assert upstream.responses_requests()[-1].json()["input"][0]["content"] == "c" * 3000


def test_creates_waiting_hold_at_most_max_body_bytes_together(make_proxy, upstream):
    release = threading.Event()
    upstream.handler = held_back(release)
    with make_proxy(max_body_bytes=8192) as url, Socket(url) as ws:
        ws.send({"type": "response.create", "model": "gpt-5", "input": "first"})
        for text in "abc":
            ws.send({"type": "response.create", "model": "gpt-5", "input": text * 3000})
        error = ws.recv()  # the third waiting one: 9000 bytes waiting would be over the limit
        assert (error["type"], error["status"], error["error"]["code"]) == ("error", 429, "too_many_requests")
        release.set()
        for _ in range(3):
            assert texts(completed(ws.events())) == ["Hello there"]
    assert [r.json()["input"][:1] for r in upstream.responses_requests()] == ["f", "a", "b"]


def test_a_large_frame_is_read_and_its_body_written_off_the_event_loop(proxy_url, upstream, monkeypatch):
    """As HTTP reads a large body: on the loop, 50 MB of small items took 2.7 s to read and write
    again, during which every other connection of the worker waited."""
    from proxy.http.websocket import connection
    from proxy.http.websocket import wire as events

    threads: dict[str, list[str]] = {"decode": [], "encode": []}
    decode, encode = events.decode, connection.encoded

    def spy_decode(text):
        threads["decode"].append(threading.current_thread().name)
        return decode(text)

    def spy_encode(body, large):
        threads["encode"].append(threading.current_thread().name)
        return encode(body, large)

    monkeypatch.setattr(events, "decode", spy_decode)
    monkeypatch.setattr(connection, "encoded", spy_encode)
    many = [{"type": "message", "role": "user", "content": f"m{i} " + "x" * 100} for i in range(15_000)]  # 2.2 MB
    with Socket(proxy_url) as ws:
        one = completed(ws.create(input=many, store=False))
        completed(ws.create(input="small", store=False, previous_response_id=one["id"]))  # small frame, long history
        completed(ws.create(input="alone", store=False))
    assert [name.split("_")[0] for name in threads["decode"]] == ["offload-cpu", *[threads["decode"][1]] * 2]
    assert not threads["decode"][1].startswith("offload-cpu")
    assert [name.startswith("offload-cpu") for name in threads["encode"]] == [True, True, False]


# ---------------------------------------------------------------- compaction_trigger over the WebSocket

TRIGGER = {"type": "compaction_trigger"}
WORK = [
    {"type": "message", "role": "user", "content": "Run the tests."},
    {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "\n".join(f"test {i} ok" for i in range(300))},
]


@pytest.fixture
def summarising(upstream, fresh_summary_memory):
    """The fake model answers the proxy's summary calls with a snapshot, and every turn "Hello there"."""
    upstream.handler = scripted(lambda rec: answer(rec, message("Hello there")))


def compaction_of(events: list[dict]) -> dict:
    [item] = completed(events)["output"]
    assert item["type"] == "compaction", item
    return item


def test_a_trigger_continuing_a_held_response_compacts_the_whole_history(proxy_url, upstream, summarising):
    with Socket(proxy_url) as ws:
        one = completed(ws.create(input=WORK, store=False))
        compaction_of(ws.create(input=[TRIGGER], store=False, previous_response_id=one["id"]))
        # a trigger naming a response the connection does not hold: stored upstream (refused, as over
        # HTTP: the proxy cannot compact what it was not sent), or not at all
        [error] = ws.create(input=[*WORK, TRIGGER], previous_response_id="resp_elsewhere")
        assert (error["status"], error["error"]["param"]) == (400, "previous_response_id")
        [error] = ws.create(input=[*WORK, TRIGGER], store=False, previous_response_id="resp_elsewhere")
        assert error["error"]["code"] == "previous_response_not_found"
    assert len(upstream.responses_requests()) == 1  # the first turn only


@pytest.mark.parametrize(
    "items",
    [
        [*WORK, TRIGGER, TRIGGER],
        [TRIGGER, *WORK],
        [TRIGGER],
        [*WORK, {**TRIGGER, "id": "ct_1"}],
        [*WORK, {"type": "message", "role": "user", "content": [TRIGGER]}],  # inside a message: no trigger
        [*WORK, {"type": ["compaction_trigger"]}],
        [*WORK, {"type": None}],
    ],
)
def test_triggers_of_other_shapes_are_error_events_or_no_trigger_never_a_close(proxy_url, upstream, items, summarising):
    with Socket(proxy_url) as ws:
        got = ws.create(input=items, store=False)
        assert got[-1]["type"] in ("error", "response.completed")
        if got[-1]["type"] == "error":
            assert got[-1]["status"] == 400
        else:
            assert all(item["type"] != "compaction" for item in completed(got)["output"])
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]


def test_continuing_a_compaction_response_by_its_id_goes_on_from_its_compaction_item(proxy_url, upstream, summarising):
    """Its input is held without the trigger (proxy/http/websocket/connection.py): continued by its id,
    the history goes on from the compaction item, as when the client sends the item itself
    (Codex's way); both answer alike (docs/websocket.md)."""
    with Socket(proxy_url) as ws:
        done = compaction_of(ws.create(input=[*WORK, TRIGGER], store=False))
        by_id = completed(
            ws.create(
                input="go on",
                store=False,
                previous_response_id=completed(ws.create(input=[*WORK, TRIGGER], store=False))["id"],
            )
        )
        by_item = completed(
            ws.create(input=[done, {"type": "message", "role": "user", "content": "go on"}], store=False)
        )
        assert texts(by_id) == texts(by_item) == ["Hello there"]


def test_a_failing_summary_is_a_502_error_event_and_the_connection_goes_on(proxy_url, upstream, fresh_summary_memory):
    from starlette.responses import JSONResponse

    from tests.harness.servers import is_summary_call

    async def failing(request, rec):
        if is_summary_call(rec):
            return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, status_code=500)
        return await default_handler(request, rec)

    upstream.handler = failing
    with Socket(proxy_url) as ws:
        # a history of its own: a summary of WORK made by another test may be remembered by the process
        [error] = ws.create(
            input=[*WORK, {"type": "message", "role": "user", "content": "failing"}, TRIGGER],
            store=False,
            stream_id="s",
        )
        assert (error["status"], error["error"]["code"], error["stream_id"]) == (502, "compaction_failed", "s")
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]


def test_a_store_that_is_down_is_a_503_error_event_for_the_trigger(make_proxy, upstream, summarising):
    with make_proxy(redis_url="redis://127.0.0.1:27999", store_timeout=0.2) as url, Socket(url) as ws:
        [error] = ws.create(input=[*WORK, TRIGGER], store=False)
        assert (error["status"], error["error"]["code"]) == (503, "store_unavailable")
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]


# ---------------------------------------------------------------- connections dying abnormally


def test_connections_dropped_mid_response_leave_no_task_no_count_and_nothing_held(upstream, tmp_path):
    """20 clients vanish mid-response (TCP torn down, no close frame): each upstream call is
    cancelled, the tenant's connection count comes back to zero (with a limit of 2 it is not
    locked out), and the server's event loop runs as many tasks as before."""
    import socket as sockets

    from starlette.routing import WebSocketRoute

    from proxy.config import ServerSettings
    from proxy.http.app import create_app
    from tests.harness.servers import ServerThread

    arrived, cancelled = threading.Semaphore(0), threading.Semaphore(0)

    async def hanging(request, rec):
        if not is_responses_create(rec):
            return await default_handler(request, rec)
        arrived.release()
        while not await request.is_disconnected():
            await asyncio.sleep(0.01)
        cancelled.release()
        return await default_handler(request, rec)

    app = create_app(ServerSettings(upstream=f"{upstream.url}/v1", data_dir=tmp_path, ws_connections_per_tenant=2))
    [route] = [r for r in app.routes if isinstance(r, WebSocketRoute)]
    open_connections = route.endpoint.open

    with ServerThread(app) as server:
        loop = server.server.servers[0].get_loop()

        def tasks() -> int:
            async def count() -> int:
                return len(asyncio.all_tasks())

            return asyncio.run_coroutine_threadsafe(count(), loop).result(10)

        def settled(check) -> bool:
            deadline = time.monotonic() + 20
            while not check():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
            return True

        with Socket(server.url, "sk-abrupt") as ws:  # one whole turn first: everything lazily made is made
            completed(ws.create(input="warm"))
        upstream.handler = hanging
        assert settled(lambda: len(open_connections) == 0)
        before = tasks()
        for i in range(20):
            ws = Socket(server.url, "sk-abrupt")
            ws.send({"type": "response.create", "model": "gpt-5", "input": f"hang {i}", "stream_id": "a"})
            ws.send({"type": "response.create", "model": "gpt-5", "input": f"waits {i}", "stream_id": "a"})
            assert arrived.acquire(timeout=10)
            ws.ws.socket.shutdown(sockets.SHUT_RDWR)
            ws.ws.socket.close()
            assert cancelled.acquire(timeout=10)
        assert settled(lambda: len(open_connections) == 0)
        assert settled(lambda: tasks() <= before), (tasks(), before)
        upstream.handler = default_handler
        with Socket(server.url, "sk-abrupt") as one, Socket(server.url, "sk-abrupt") as two:
            for ws in (one, two):
                assert texts(completed(ws.create(input="after"))) == ["Hello there"]
    sent = [r.json()["input"] for r in upstream.responses_requests()]
    assert not [text for text in sent if text.startswith("waits")]  # a create waiting behind one never ran


def test_a_stored_chain_is_continued_over_the_websocket_by_its_own_tenant_only(make_proxy, upstream):
    """A's response (store true) left the answer of a hidden reload waiting for A's next request
    (`proxy.offload.records`): B, or a sub-tenant of A, naming its id on a connection of
    their own get nothing of it; A, on a new connection, gets it."""
    from tests.e2e.test_chain_attacks import HEADERS, NEEDLE, TOOLS, A, B, carried, history, mixed
    from tests.harness.responses import function_call_output

    with make_proxy() as url:
        upstream.handler = mixed("resp_ws_chain_1")
        with Socket(url, A, headers=HEADERS) as ws:
            final = completed(ws.create(input=history(), tools=TOOLS))
        assert final["id"] == "resp_ws_chain_1" and NEEDLE not in json.dumps(final)
        upstream.handler = default_handler
        follow = {
            "tools": TOOLS,
            "input": [function_call_output("call_client", "no file")],
            "previous_response_id": "resp_ws_chain_1",
        }
        for key, headers in ((B, HEADERS), (A, {**HEADERS, "X-Offload-Tenant": "sub-1"})):
            with Socket(url, key, headers=headers) as ws:
                got = ws.create(**follow)
            sent = upstream.responses_requests()[-1].json()
            assert carried(sent) == [] and NEEDLE not in json.dumps(sent) and NEEDLE not in json.dumps(got)
        with Socket(url, A, headers=HEADERS) as ws:
            ws.create(**follow)
        sent = upstream.responses_requests()[-1].json()
        assert carried(sent) == ["call_inj"] and NEEDLE in json.dumps(sent)


def test_a_client_pinging_without_reading_is_dropped_not_buffered(proxy_url, upstream):
    """uvicorn answers each ping past its flow control: 200 MB of pings from a client that never
    read left 186 MB of pongs in the server's memory (`proxy.http.websocket.wire`)."""
    import base64
    import os
    import socket as sockets

    port = int(proxy_url.rsplit(":", 1)[1])
    with sockets.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.setsockopt(sockets.SOL_SOCKET, sockets.SO_RCVBUF, 4096)
        key = base64.b64encode(os.urandom(16)).decode()
        raw.sendall(
            f"GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Authorization: Bearer sk-pinging\r\n\r\n".encode()
        )
        assert raw.recv(4096).startswith(b"HTTP/1.1 101")
        pings = (bytes([0x89, 0x80 | 125]) + b"\x00" * 4 + b"p" * 125) * 8000  # 1 MB of masked pings
        sent = 0
        with pytest.raises(OSError):  # reset by the server
            while sent < 200_000_000:
                raw.sendall(pings)
                sent += len(pings)
    assert sent < 100_000_000
