"""A 200 answer that is not a chat completion (an HTML page from a gateway, a JSON body where a
stream was asked for, nothing at all) while the proxy runs the reload loop: an OpenAI-shaped
502 `upstream_error`, or in a stream an SSE error event then [DONE]; never a 500."""

from __future__ import annotations

import json

import httpx2
import pytest
from starlette.responses import JSONResponse, Response

from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post
from tests.harness.servers import completion, scripted, stream_chunks, tool_call

HEADERS = {
    "authorization": "Bearer sk-not-a-completion",
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Mode": "compact",
}
HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


def html(rec) -> Response:
    return Response(HTML, status_code=200, media_type="text/html")


def reload_call(rec) -> Response:
    return JSONResponse(completion(None, tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]})]))


def reload_call_streamed(rec) -> Response:
    chunks = stream_chunks(None, tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]})])
    return Response(b"".join(chunks), media_type="text/event-stream")


def history_body(stream: bool = False) -> dict:
    return {"model": "gpt-4o", "messages": agent_history(steps=4), "stream": stream}


def sse_events(r: httpx2.Response) -> list[str]:
    return [line[len("data: ") :] for line in r.text.split("\n") if line.startswith("data: ")]


@pytest.mark.parametrize(
    "answers",
    [
        (html,),  # the first answer
        (reload_call, html),  # the answer to a reload round
        (lambda rec: Response(b"", status_code=200, media_type="application/json"),),
        (lambda rec: Response(b'["not", "an", "object"]', status_code=200, media_type="application/json"),),
    ],
    ids=["html", "html-after-a-reload-round", "empty", "json-array"],
)
def test_a_non_completion_200_is_a_502(proxy_url, upstream, answers):
    upstream.handler = scripted(*answers)
    r = post(proxy_url, body=history_body(), headers=HEADERS)
    assert refs_sent(upstream.chat_requests()[0])  # reload tools were injected
    assert r.status_code == 502, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "upstream_error"
    assert "the upstream answered 200 with a body that is not a chat completion" in error["message"].lower()
    assert "Bad Gateway</h1>" not in error["message"]  # described, not echoed


@pytest.mark.parametrize(
    "answers",
    [
        (html,),
        (lambda rec: JSONResponse(completion("not streamed")),),  # JSON where a stream was asked for
        (lambda rec: Response(b"data: [DONE]\n\n", media_type="text/event-stream"),),  # no chunk at all
        (lambda rec: Response(b"data: <html>\n\n", media_type="text/event-stream"),),  # an event that is not JSON
        (reload_call_streamed, html),  # the answer to a reload round
    ],
    ids=["html", "json", "done-only", "not-json-event", "html-after-a-reload-round"],
)
def test_a_non_completion_200_in_a_stream_is_an_error_event_then_done(proxy_url, upstream, answers):
    upstream.handler = scripted(*answers)
    r = post(proxy_url, body=history_body(stream=True), headers=HEADERS)
    assert refs_sent(upstream.chat_requests()[0])
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")  # the proxy's events, whatever came
    events = sse_events(r)
    assert events[-1] == "[DONE]" and len(events) >= 2, r.text
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error" and error["code"] == "upstream_error"
    assert "the upstream answered 200 with a body that is not a chat completion stream" in error["message"].lower()
    for event in events[:-2]:  # whatever came before (a reload round's hidden call) is a chunk
        assert "choices" in json.loads(event)
