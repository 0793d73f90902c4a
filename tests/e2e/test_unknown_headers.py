"""An `X-Offload-*` header the proxy does not read (a misspelt setting): the request is served as
without it, the answer's `X-Offload-Warning` names it and the known header closest to it, it is
counted in `offload_unknown_headers_total`, and it never goes upstream. On every endpoint under
/v1, managed or relayed, and on the WebSocket mode's upgrade; a thousand of them, or a 50 KB
name, neither stall nor bloat anything."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from tests.harness.servers import FakeUpstream
from tests.harness.websocket import Socket, completed, texts

MEANT = "X-Offload-Max-Total-Tokens"
WARNED = f"unknown header X-Offload-Max-Tokens ignored (did you mean X-Offload-Hard-Max-Tokens or {MEANT}?)"
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
ENDPOINTS = [  # (method, path, body): managed, counted and relayed
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/chat/completions", {**CHAT, "stream": True}),
    ("POST", "/v1/responses", {"model": "gpt-5", "input": "hi"}),
    ("POST", "/v1/responses", {"model": "gpt-5", "input": "hi", "stream": True}),
    ("POST", "/v1/messages", MESSAGES),
    ("POST", "/v1/messages/count_tokens", {"model": "claude-sonnet-4-5", "messages": MESSAGES["messages"]}),
    ("GET", "/v1/models", None),
    ("POST", "/v1/embeddings", {"model": "text-embedding-3-small", "input": "hi"}),
]


@pytest.fixture(scope="module")
def proxy(make_proxy) -> Iterator[str]:
    """A proxy of this module's own: its counter starts at zero."""
    with make_proxy() as url:
        yield url


def headers(key: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "x-api-key": key, "anthropic-version": "2023-06-01", **extra}


def counted(url: str) -> dict[str, float]:
    """offload_unknown_headers_total by its label."""
    found = {}
    for line in httpx2.get(f"{url}/metrics", timeout=20).text.splitlines():
        if line.startswith("offload_unknown_headers_total{"):
            label = line.split('closest="', 1)[1].split('"', 1)[0]
            found[label] = float(line.rsplit(" ", 1)[1])
    return found


def no_offload_header_went_upstream(upstream: FakeUpstream) -> bool:
    return all(not name.lower().startswith("x-offload-") for rec in upstream.requests for name, _ in rec.header_list)


@pytest.mark.parametrize(
    "method,path,body", ENDPOINTS, ids=[f"{p}{'-stream' if b and b.get('stream') else ''}" for _, p, b in ENDPOINTS]
)
def test_a_misspelt_setting_is_served_warned_counted_and_kept_from_the_upstream(
    proxy, upstream, key, method, path, body
):
    before = counted(proxy).get("X-Offload-Hard-Max-Tokens", 0)
    r = httpx2.request(
        method, f"{proxy}{path}", json=body, timeout=20, headers=headers(key, **{"X-Offload-Max-Tokens": "5"})
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-offload-warning"] == WARNED
    assert r.headers.get_list("x-offload-warning") == [WARNED]  # one header, not one per warning
    assert upstream.requests and no_offload_header_went_upstream(upstream)
    assert counted(proxy).get("X-Offload-Hard-Max-Tokens", 0) == before + 1


def test_the_setting_it_misspells_is_not_applied(proxy, upstream, key):
    from tests.harness.history import agent_history

    history = agent_history(steps=4, lines=60)  # under the default trigger, over 500
    misspelt = httpx2.post(
        f"{proxy}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": history},
        timeout=20,
        headers=headers(key, **{"X-Offload-Max-Tokens": "500"}),
    )
    meant = httpx2.post(
        f"{proxy}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": history},
        timeout=20,
        headers=headers(key, **{MEANT: "500"}),
    )
    assert misspelt.status_code == meant.status_code == 200
    assert misspelt.headers["x-offload-action"] == "none" and "x-offload-warning" in misspelt.headers
    assert meant.headers["x-offload-action"] != "none" and "unknown header" not in meant.headers.get(
        "x-offload-warning", ""
    )


def test_the_turns_own_warning_comes_first_in_the_same_header(proxy, upstream, key):
    body = {**CHAT, "tools": [{"type": "function", "function": {"name": "context_search", "parameters": {}}}]}
    r = httpx2.post(
        f"{proxy}/v1/chat/completions", json=body, timeout=20, headers=headers(key, **{"X-Offload-Max-Tokens": "5"})
    )
    assert r.status_code == 200
    [warning] = r.headers.get_list("x-offload-warning")
    own, _, ours = warning.partition("; unknown header")
    assert "declares its own tool named context_search" in own and ours.startswith(" X-Offload-Max-Tokens ignored")


def test_known_headers_in_any_spelling_the_resolver_reads_get_no_warning(proxy, upstream, key):
    before = counted(proxy)
    r = httpx2.post(
        f"{proxy}/v1/chat/completions",
        json=CHAT,
        timeout=20,
        headers=headers(
            key,
            **{
                "x-offload-max-total-tokens": "9000",
                "X-OFFLOAD-MODE": "auto",
                "X-Offload-Keep_Recent": "2",
                "X-Offload-Session": "s-1",
                "X-Offload-Tenant": "team-a",
            },
        ),
    )
    assert r.status_code == 200 and "x-offload-warning" not in r.headers
    assert counted(proxy) == before


def test_a_request_refused_before_it_is_routed_is_not_counted(proxy, upstream):
    before = counted(proxy)
    r = httpx2.post(f"{proxy}/v1/chat/completions", json=CHAT, timeout=20, headers={"X-Offload-Max-Tokens": "5"})
    assert r.status_code == 401
    assert counted(proxy) == before and not upstream.requests


def test_a_thousand_unknown_headers_and_a_50_kb_name_are_served_in_a_short_warning(proxy, upstream, key):
    before = sum(counted(proxy).values())
    many = {f"X-Offload-Junk-{i}": "1" for i in range(1000)}
    long_name = "X-Offload-" + "Q" * 50_000
    r = httpx2.post(
        f"{proxy}/v1/chat/completions", json=CHAT, timeout=60, headers=headers(key, **many, **{long_name: "1"})
    )
    assert r.status_code == 200, r.text
    warning = r.headers["x-offload-warning"]
    assert len(warning) < 1000 and warning.startswith("unknown header X-Offload-Junk-0 ignored")
    assert warning.endswith("; 993 more unknown X-Offload-* headers ignored")
    assert sum(counted(proxy).values()) == before + 1001
    assert set(counted(proxy)) <= {"none", "unchecked", "X-Offload-Hard-Max-Tokens"}  # no client text as a label
    assert no_offload_header_went_upstream(upstream)
    alone = httpx2.post(f"{proxy}/v1/chat/completions", json=CHAT, timeout=60, headers=headers(key, **{long_name: "1"}))
    assert alone.status_code == 200
    assert alone.headers["x-offload-warning"] == (
        f"unknown header X-Offload-Q{'q' * 53}... ignored (not an X-Offload-* setting)"
    )


def test_the_websocket_upgrade_says_so_and_each_response_create_counts(proxy, upstream, key):
    before = counted(proxy).get("X-Offload-Hard-Max-Tokens", 0)
    with Socket(proxy, key, headers={"X-Offload-Max-Tokens": "5"}) as ws:
        assert ws.ws.response is not None and ws.ws.response.headers["x-offload-warning"] == WARNED
        assert texts(completed(ws.create(input="hi"))) == ["Hello there"]
        assert texts(completed(ws.create(input="again"))) == ["Hello there"]
    assert counted(proxy).get("X-Offload-Hard-Max-Tokens", 0) == before + 2
    assert no_offload_header_went_upstream(upstream)
    with Socket(proxy, key) as ws:  # nothing unknown: nothing said
        assert ws.ws.response is not None and "x-offload-warning" not in ws.ws.response.headers
