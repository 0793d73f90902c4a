"""A WebSocket's client events read, its error events written."""

from __future__ import annotations

import json

import pytest

from proxy.errors import ProxyError
from proxy.http.error_map import status_of
from proxy.http.websocket import wire as events


def test_a_create_is_the_http_body_with_streaming_implied():
    create = events.parse(
        json.dumps({"type": "response.create", "model": "m", "input": "hi", "stream_id": "a", "stream": False})
    )
    assert create is not None and (create.body, create.stream_id) == (
        {"model": "m", "input": "hi", "stream": True},
        "a",
    )


def test_an_acknowledgement_is_nothing_to_do():
    assert events.parse('{"type": "response.processed", "response_id": "r"}') is None


@pytest.mark.parametrize(
    "text, code",
    [
        ("{", "invalid_json"),
        ("[" * 100_000, "invalid_json"),
        ("3", "invalid_event"),
        ('{"type": 5}', "unknown_event_type"),
        ('{"type": "response.steer"}', "unknown_event_type"),
        ('{"type": ["response.processed"]}', "unknown_event_type"),
        ('{"type": {"a": 1}}', "unknown_event_type"),
        ('{"type": "response.create", "stream_id": {}}', "invalid_value"),
        ('{"type": "response.create", "stream_id": "' + "x" * 300 + '"}', "invalid_value"),
        ('{"type": "response.create", "background": true}', "unsupported_parameter"),
    ],
)
def test_bad_events_are_refused_with_a_code(text, code):
    with pytest.raises(ProxyError) as refused:
        events.parse(text)
    assert (status_of(refused.value), refused.value.code) == (400, code)


def test_an_http_error_answer_keeps_its_error_object_and_status():
    body = json.dumps({"error": {"message": "slow", "type": "requests", "code": "rate_limit_exceeded", "param": None}})
    assert events.from_http_answer(429, body.encode(), "lane") == {
        "type": "error",
        "status": 429,
        "stream_id": "lane",
        "error": {"type": "requests", "code": "rate_limit_exceeded", "message": "slow", "param": None},
    }


def test_a_non_json_error_answer_is_said_briefly():
    event = events.from_http_answer(502, b"<html>bad gateway</html>" + b"x" * 10_000)
    assert event["status"] == 502 and event["error"]["type"] == "server_error"
    assert event["error"]["message"].startswith("The upstream answered 502: <html>bad gateway")
    assert len(event["error"]["message"]) < 600


@pytest.mark.parametrize("data", ['{"type":"a"}', '{ "type": "a" } ', "{}"])
def test_an_event_names_its_lane(data):
    named = json.loads(events.with_stream_id(data, 'la"ne'))
    assert named["stream_id"] == 'la"ne' and {k: v for k, v in named.items() if k != "stream_id"} == json.loads(data)


def test_without_a_lane_an_event_is_as_it_came():
    assert events.with_stream_id('{"type":"a"}', None) == '{"type":"a"}'


@pytest.mark.parametrize("depth", [100, 1000, 1023])
def test_a_deep_create_is_read_its_memory_counted(depth):
    """The managed route refuses it (nested past 128 levels) as over HTTP; reading it must not fail."""
    create = events.parse('{"type": "response.create", "input": ' + "[" * depth + "]" * depth + "}")
    assert create is not None and create.memory > depth * 56
