"""The Messages adapter against hostile or broken input: events out of order, odd blocks, and
histories whose shape must come out exactly as it went in."""

from __future__ import annotations

import pytest

from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.messages._rounds import StreamRewriter
from proxy.http.caller import tenants_from_config

START = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 5, "output_tokens": 1}}}


def feed(*events: dict) -> tuple[StreamRewriter, list[dict]]:
    rewriter, out = StreamRewriter(INJECTED_TOOLS), []
    for event in events:
        out += rewriter.feed(event)
    return rewriter, out


def indices(out: list[dict]) -> list[tuple[str, int]]:
    return [(e["type"], e["index"]) for e in out if "index" in e]


def test_a_delta_before_its_start_keeps_one_index():
    _, out = feed(
        START,
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    )
    assert indices(out) == [
        ("content_block_delta", 0),
        ("content_block_start", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
    ]


def test_a_repeated_start_keeps_its_index():
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    _, out = feed(START, block, block, {"type": "content_block_stop", "index": 0})
    assert indices(out) == [("content_block_start", 0), ("content_block_start", 0), ("content_block_stop", 0)]


def test_citations_that_are_not_a_list_are_not_spread():
    rewriter, _ = feed(
        START,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "", "citations": "bad"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "y"}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "citations_delta", "citation": {"cited_text": "x"}},
        },
    )
    assert rewriter.round_message()["content"][0]["citations"] == [{"cited_text": "x"}]


@pytest.mark.parametrize("field", ["upstream", "anthropic_upstream"])
@pytest.mark.parametrize(
    "value",
    [
        "api.anthropic.com",
        "https://host/v1?key=x",
        "https://host/#x",
        42,
        "",
        "ftp://host",
        "https://ho st/v1",
        ["https://host"],
    ],
)
def test_a_tenant_upstream_must_be_a_plain_url(field, value):
    """Checked at startup: a query would swallow the paths the proxy appends, a bare host fails every request."""
    with pytest.raises(ValueError, match=field):
        tenants_from_config({"a": {"api_keys": ["pk-tenant-a-0123456789"], field: value}})


def test_tenant_upstreams_as_written():
    tenant = tenants_from_config({"a": {"upstream": "https://gw.example/v1/", "anthropic_upstream": "http://h:8/"}})[
        "a"
    ]
    assert (tenant.base("openai"), tenant.base("anthropic")) == ("https://gw.example/v1", "http://h:8/v1")


def test_a_timeout_is_a_timeout_error_in_every_anthropic_stream():
    """A relayed stream that times out and a reload round that times out say the same."""
    import httpx2

    from proxy.errors import anthropic_error_event
    from proxy.formats.messages import MESSAGES
    from proxy.upstream.transport import stream_broke

    for cause, kind in (
        (httpx2.ReadTimeout("slow"), "timeout_error"),
        (httpx2.RemoteProtocolError("cut"), "api_error"),
    ):
        broke = stream_broke(cause)
        rounds = MESSAGES.rounds(
            {"model": "m", "max_tokens": 10, "stream": True, "messages": []}, [], [], extra_usage=None
        )
        assert anthropic_error_event(broke)["error"]["type"] == rounds.fail(broke)[0]["error"]["type"] == kind
