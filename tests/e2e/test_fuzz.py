"""Hypothesis fuzzing of chat bodies and X-Offload-* headers against the whole app.

Whatever comes in, the proxy itself never answers 500, and its invariants hold: tool pairing
and message order untouched, every offloaded reference reloads byte for byte, and no
reference can be read with another credential.
"""

from __future__ import annotations

import json

import httpx2
import pytest
import respx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy.config import ServerSettings
from proxy.core.texts import SUMMARY_INSTRUCTION, SUMMARY_PROMPT
from proxy.http.app import create_app
from tests.harness.history import REF

BASE = "http://fuzz-upstream.test/v1"


def upstream_answer(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    messages = body.get("messages") if isinstance(body, dict) else None
    first = messages[0] if isinstance(messages, list) and messages else {}
    last = messages[-1] if isinstance(messages, list) and messages else {}
    if last == {"role": "user", "content": SUMMARY_INSTRUCTION} or first == {
        "role": "system",
        "content": SUMMARY_PROMPT,
    }:
        content = "<state_snapshot><current_state>fuzz</current_state></state_snapshot>"
    else:
        content = "ok"
    return httpx2.Response(
        200,
        json={
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        },
    )


@pytest.fixture(scope="module")
def app_client(tmp_path_factory):
    app = create_app(ServerSettings(upstream=BASE, data_dir=tmp_path_factory.mktemp("fuzz")))
    with respx.mock(assert_all_called=False) as mock, TestClient(app, raise_server_exceptions=False) as client:
        route = mock.post(f"{BASE}/chat/completions").mock(side_effect=upstream_answer)
        yield client, route


text = st.one_of(
    st.text(max_size=40), st.builds(lambda t, n: t * n, st.text(min_size=1, max_size=12), st.integers(1, 4000))
)
part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
    st.dictionaries(st.sampled_from(["type", "x"]), st.text(max_size=5), max_size=2),
)
content = st.one_of(st.none(), text, st.lists(part, max_size=3), st.integers(), st.booleans())
call = st.builds(
    lambda i, name: {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}},
    st.integers(0, 5),
    st.sampled_from(["bash", "context_reload", "read"]),
)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "function", "oddity"])},
        optional={
            "content": content,
            "tool_call_id": st.builds(lambda i: f"c{i}", st.integers(0, 5)),
            "tool_calls": st.lists(call, max_size=2),
            "name": st.text(max_size=8),
        },
    ),
    st.none(),
    st.integers(),
    st.text(max_size=5),
)
body = st.one_of(
    st.fixed_dictionaries(
        {"model": st.sampled_from(["gpt-4o", "gpt-4", "x"]), "messages": st.lists(message, max_size=12)},
        optional={"stream": st.just(False), "tools": st.just([])},
    ),
    st.fixed_dictionaries({"model": st.just("gpt-4o")}, optional={"messages": st.one_of(st.text(), st.integers())}),
    st.lists(st.integers(), max_size=2),
)
header_values = {
    "X-Offload-Mode": st.sampled_from(["auto", "compact", "compress", "off", "AUTO", "", "zzz"]),
    "X-Offload-Max-Total-Tokens": st.sampled_from(["0", "50", "1000", "-3", "1e3", "99999999999"]),
    "X-Offload-Max-Tool-Message-Tokens": st.sampled_from(["1", "20", "2000", "0", "x"]),
    "X-Offload-Keep-Recent": st.sampled_from(["0", "1", "2", "5", "-1"]),
    "X-Offload-Tenant": st.sampled_from(["a", "team/b", "bad tenant", "x" * 300]),
    "X-Offload-Session": st.sampled_from(["s1", "s 2", ""]),
    "X-Offload-Reload-Tools": st.sampled_from(["on", "off", "maybe"]),
    "X-Offload-Compaction-Ratio": st.sampled_from(["0.5", "2", "nan"]),
}
headers = st.fixed_dictionaries({}, optional=header_values)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(payload=body, offload_headers=headers)
def test_fuzzed_chat_requests(app_client, payload, offload_headers):
    client, route = app_client
    calls_before = route.call_count
    auth = {"authorization": "Bearer sk-fuzz"}
    r = client.post("/v1/chat/completions", content=json.dumps(payload), headers={**auth, **offload_headers})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        return
    assert route.call_count > calls_before
    sent = json.loads(route.calls.last.request.content)
    original = payload.get("messages") if isinstance(payload, dict) else None
    if not isinstance(original, list) or "x-offload-tokens-after" not in r.headers:
        return
    if r.headers["x-offload-action"] in ("none", "compact"):
        assert len(sent["messages"]) == len(original)
        for before, after in zip(original, sent["messages"]):
            if isinstance(before, dict):
                assert {k: v for k, v in before.items() if k != "content"} == {
                    k: v for k, v in after.items() if k != "content"
                }
            else:
                assert before == after
    tenant = {"X-Offload-Tenant": offload_headers["X-Offload-Tenant"]} if "X-Offload-Tenant" in offload_headers else {}
    for ref in set(REF.findall(json.dumps(sent["messages"]))):
        mine = client.get(f"/v1/offload/{ref}", headers={**auth, **tenant})
        assert mine.status_code == 200
        if mine.json()["kind"] == "tool_result":
            texts = [m.get("content") for m in original if isinstance(m, dict)]
            texts += [
                "\n".join(
                    p["text"]
                    for p in m["content"]
                    if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                )
                for m in original
                if isinstance(m, dict) and isinstance(m.get("content"), list)
            ]
            assert mine.json()["content"] in texts
        assert (
            client.get(f"/v1/offload/{ref}", headers={"authorization": "Bearer sk-other", **tenant}).status_code == 404
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    offload_headers=headers,
    path=st.sampled_from(["/v1/offload", "/v1/offload/events", "/v1/offload/abc"]),
    credential=st.sampled_from(
        [
            {},
            {"authorization": "Bearer sk-fuzz"},
            {"x-api-key": "sk-fuzz"},
            {"api-key": "sk-fuzz"},
            {"authorization": "Bearer "},
        ]
    ),
)
def test_fuzzed_offload_api(app_client, offload_headers, path, credential):
    client, _ = app_client
    sent = {**offload_headers, **credential}
    if path == "/v1/offload":
        r = client.post(
            path, json={"messages": [{"role": "tool", "tool_call_id": "x", "content": "y" * 9000}]}, headers=sent
        )
    else:
        r = client.get(path, headers=sent)
    anonymous = not any(v.removeprefix("Bearer ").strip() for v in credential.values())
    assert r.status_code in ((401,) if anonymous else (200, 400, 404)), r.text
