"""Images the proxy cannot read, cannot see or must not take: forwarded as they came or refused
in the endpoint's shape, never a 500, never a changed image upstream; reloads stay in their namespace."""

from __future__ import annotations

import base64
import json

import httpx2
import pytest
from starlette.responses import JSONResponse

from proxy.core import texts
from tests.harness import anthropic as fake_anthropic
from tests.harness.screens import b64, data_url, screenshot
from tests.harness.servers import completion, scripted

# Four screenshots, one older than the most recent three: offloaded at once with image_batch=1
# (the default waits for a chunk of 6, docs/configuration.md), which every proxy here is given.
SHOTS = [screenshot(step) for step in range(4)]
AUTH = {"authorization": "Bearer sk-test-key"}


def _chat(urls: list[str]) -> dict:
    messages: list[dict] = []
    for step, url in enumerate(urls):
        messages.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})
        messages.append({"role": "assistant", "content": f"step {step}"})
    messages.append({"role": "user", "content": "next?"})
    return {"model": "gpt-4o", "messages": messages}


BAD = {
    "invalid base64": "data:image/png;base64,iVBORw0KGgo!!!!" + "A" * 400,
    "media type that lies": "data:image/jpeg;base64," + b64(SHOTS[0]),
    "empty": "data:image/png;base64,",
    "not an image": "data:image/png;base64," + base64.b64encode(b"%PDF-1.7 hello").decode(),
    "url": "https://example.com/screen.png",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_unreadable_or_lying_images_go_upstream_as_they_came(make_proxy, upstream, name):
    upstream.handler = scripted(lambda rec: JSONResponse(completion("ok")))
    body = _chat([BAD[name]] + [data_url(s) for s in SHOTS[1:]])
    with make_proxy(image_batch=1) as url, httpx2.Client(base_url=url, timeout=30) as client:
        r = client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    [sent] = upstream.chat_requests()
    assert sent.json()["messages"][0] == body["messages"][0]  # untouched, though older than the last three
    assert texts.media_refs_in(json.dumps(sent.json())) == []


def test_a_truncated_png_is_offloaded_and_reloaded_exactly_as_sent(make_proxy, upstream):
    cut = data_url(SHOTS[0][:5_000])  # its header reads; the rest is the client's business
    refs: list[str] = []

    def first(rec):
        refs.extend(m.group(2) for m in texts.MEDIA_MARKER_RE.finditer(rec.body.decode()))
        call = {
            "id": "proxy_1",
            "type": "function",
            "function": {"name": "context_reload", "arguments": json.dumps({"ref": refs[0]})},
        }
        return JSONResponse(completion(None, tool_calls=[call]))

    upstream.handler = scripted(first, lambda rec: JSONResponse(completion("ok")))
    with make_proxy(image_batch=1) as url, httpx2.Client(base_url=url, timeout=30) as client:
        r = client.post("/v1/chat/completions", json=_chat([cut] + [data_url(s) for s in SHOTS[1:]]), headers=AUTH)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    _, second = upstream.chat_requests()
    assert second.json()["messages"][-1]["content"][1] == {"type": "image_url", "image_url": {"url": cut}}


def test_a_50_mb_image_is_refused_in_each_endpoint_shape_never_a_500(make_proxy, upstream):
    huge = "data:image/png;base64," + b64(SHOTS[0]) + "A" * (50 * 1024 * 1024 * 4 // 3)
    with make_proxy(image_batch=1) as url, httpx2.Client(base_url=url, timeout=60) as client:
        r = client.post("/v1/chat/completions", json=_chat([huge]), headers=AUTH)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": huge[22:]}}
        r = client.post(
            "/v1/messages",
            json={"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": [block]}]},
            headers={"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"},
        )
        assert r.status_code == 413 and r.json()["type"] == "error"
    assert upstream.requests == [] or all(
        not rec.path.endswith(("completions", "messages")) for rec in upstream.requests
    )


def test_a_large_image_under_the_body_limit_is_offloaded(make_proxy, upstream):
    big = "data:image/png;base64," + b64(SHOTS[0]) + "A" * (30 * 1024 * 1024)  # a PNG header, 30 MB after it
    upstream.handler = scripted(lambda rec: JSONResponse(completion("ok")))
    with make_proxy(image_batch=1) as url, httpx2.Client(base_url=url, timeout=60) as client:
        r = client.post("/v1/chat/completions", json=_chat([big] + [data_url(s) for s in SHOTS[1:]]), headers=AUTH)
    assert r.status_code == 200, r.text[:300]
    [sent] = upstream.chat_requests()
    assert len(sent.body) < 2_000_000 and r.headers["x-offload-refs"] == "1"


def test_a_file_id_the_proxy_cannot_see_is_forwarded(make_proxy, upstream):
    from tests.harness import responses as fake_responses

    upstream.handler = scripted(lambda rec: fake_responses.answer(rec, fake_responses.message("ok")))
    items = [{"role": "user", "content": [{"type": "input_image", "file_id": "file-unknown-123"}]} for _ in range(5)]
    with make_proxy(image_batch=1) as url, httpx2.Client(base_url=url, timeout=30) as client:
        r = client.post("/v1/responses", json={"model": "gpt-4o", "input": items}, headers=AUTH)
    assert r.status_code == 200
    [sent] = upstream.responses_requests()
    assert sent.json()["input"] == items


def test_a_reload_never_crosses_namespaces(make_proxy, upstream):
    """Tenant A's screenshot ref, asked for by a model under another key: not available, no image."""
    refs: list[str] = []

    def record(rec):
        refs.extend(m.group(2) for m in texts.MEDIA_MARKER_RE.finditer(rec.body.decode()))
        return fake_anthropic.answer(rec, fake_anthropic.message(fake_anthropic.text("ok")))

    def steal(rec):
        return fake_anthropic.answer(
            rec, fake_anthropic.message(fake_anthropic.tool_use("context_reload", {"ref": refs[0]}, id="toolu_steal"))
        )

    def told(rec):
        return fake_anthropic.answer(rec, fake_anthropic.message(fake_anthropic.text("done")))

    def blocks(shots):
        return [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(s)}},
                    {"type": "text", "text": "and?"},
                ],
            }
            for s in shots
        ]

    with make_proxy(image_batch=1) as url, httpx2.Client(base_url=url, timeout=30) as client:
        upstream.handler = scripted(record)
        r = client.post(
            "/v1/messages",
            json={"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": blocks(SHOTS)},
            headers={"x-api-key": "sk-ant-tenant-a", "anthropic-version": "2023-06-01"},
        )
        assert r.status_code == 200 and len(refs) == 1
        upstream.reset()
        upstream.handler = scripted(steal, told)
        # tenant B: a history with one text-only turn's marker text is not needed: the model just asks
        five = blocks([screenshot(10 + i) for i in range(4)])
        r = client.post(
            "/v1/messages",
            json={"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": five},
            headers={"x-api-key": "sk-ant-tenant-b", "anthropic-version": "2023-06-01"},
        )
    assert r.status_code == 200 and r.json()["content"][0]["text"] == "done"
    _, second = upstream.messages_requests()
    result = second.json()["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_steal" and result["content"] == texts.unavailable(refs[0])
    assert b64(SHOTS[0]) not in second.body.decode()
