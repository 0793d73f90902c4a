"""The fake upstream's --reload-once model: each offloaded tool result reloaded once per endpoint."""

from __future__ import annotations

import json

import pytest

from proxy.core.markers import tool_result_marker
from proxy.demo import fake_upstream


@pytest.fixture
def reloading(monkeypatch):
    monkeypatch.setattr(fake_upstream, "RELOADED", set())


def body(*texts: str, tools: bool = True, stream: bool = False) -> bytes:
    return json.dumps({"model": "m", "stream": stream, "messages": [{"role": "tool", "content": t} for t in texts],
                       "tools": [{"type": "function", "function": {"name": "context_reload"}}] if tools else []},
                      separators=(",", ":")).encode()


def test_the_newest_unseen_ref_once_per_endpoint(reloading):
    a, b = tool_result_marker("x\n" * 500, "refAAAAAA", 900), tool_result_marker("y\n" * 500, "refBBBBBB", 900)
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, b)) == "refBBBBBB"
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, b)) == "refAAAAAA"
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, b)) is None
    assert fake_upstream.ref_to_reload("/v1/messages", body(a, b)) == "refBBBBBB"  # another endpoint: its own


def test_no_reload_without_the_tool_in_a_reload_round_or_streamed(reloading):
    a = tool_result_marker("x\n" * 500, "refAAAAAA", 900)
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, tools=False)) is None
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, "call_demo_reload_1")) is None
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, stream=True)) is None


def test_off_by_default():
    assert fake_upstream.RELOADED is None


@pytest.mark.parametrize("path, find", [
    ("/v1/chat/completions", lambda a: a["choices"][0]["message"]["tool_calls"][0]["function"]),
    ("/v1/responses", lambda a: a["output"][0]),
    ("/v1/messages", lambda a: {**a["content"][0], "arguments": json.dumps(a["content"][0]["input"])}),
])
def test_the_call_in_each_format(path, find):
    call = find(json.loads(fake_upstream.reload_call(path, "refAAAAAA", 3)))
    assert call["name"] == "context_reload" and json.loads(call["arguments"]) == {"ref": "refAAAAAA"}
