"""Whether a Messages request asks for caching anywhere (`has_cache_control`): the walk made
fast for long histories answers as the plain recursive definition does, on any JSON."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.formats.messages._request import EPHEMERAL, has_cache_control, with_caching

_OPAQUE = {"input_schema", "input"}


def reference(body: dict) -> bool:
    def carries(value: Any) -> bool:
        if isinstance(value, list):
            return any(carries(v) for v in value)
        if isinstance(value, dict):
            return "cache_control" in value or any(carries(v) for k, v in value.items() if k not in _OPAQUE)
        return False

    return "cache_control" in body or any(carries(body.get(k)) for k in ("tools", "system", "messages"))


keys = st.sampled_from(["cache_control", "content", "input", "input_schema", "type", "text", "source", "x"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=30,
)
bodies = st.dictionaries(
    st.sampled_from(["messages", "system", "tools", "model", "cache_control"]), json_values, max_size=4
)


@settings(max_examples=400, deadline=None)
@given(bodies)
def test_the_walk_answers_as_the_recursive_definition(body):
    assert has_cache_control(body) is reference(body)


def test_a_breakpoint_anywhere_a_client_puts_one_leaves_the_request_as_it_is():
    mark = {"cache_control": dict(EPHEMERAL)}
    for body in (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", **mark}]}]},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r", **mark}]}
                    ],
                }
            ]
        },
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "content", "content": [{"type": "text", "text": "d", **mark}]},
                        }
                    ],
                }
            ]
        },
        {"messages": [], "system": [{"type": "text", "text": "s", **mark}]},
        {"messages": [], "tools": [{"name": "t", "input_schema": {}, **mark}]},
    ):
        assert has_cache_control(body) and with_caching(body) is body


def test_a_property_or_an_argument_named_cache_control_is_not_a_breakpoint():
    body = {
        "tools": [{"name": "t", "input_schema": {"properties": {"cache_control": {"type": "string"}}}}],
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {"cache_control": "x"}}],
            }
        ],
    }
    assert not has_cache_control(body) and with_caching(body)["cache_control"] == EPHEMERAL
