"""The last resort of the managed routes (`proxy.http.managed.answered`): an exception the body
checks should have made impossible is a bug, logged with its traceback, and the client still
gets a JSON error in its API's shape, never starlette's plain-text 500."""

from __future__ import annotations

import json
import logging

import pytest
from starlette.requests import Request

from proxy.http.managed import answered

pytestmark = pytest.mark.anyio


def request(headers: list[tuple[bytes, bytes]], path: str) -> Request:
    return Request({"type": "http", "method": "POST", "path": path, "headers": headers, "query_string": b""})


@pytest.mark.parametrize(
    "exc",
    [
        TypeError("unhashable type: 'list'"),
        AttributeError("'int' object has no attribute 'get'"),
        KeyError("name"),
        IndexError("list index out of range"),
    ],
)
@pytest.mark.parametrize(
    "path,headers,shape",
    [
        ("/v1/chat/completions", [], "openai"),
        ("/v1/messages", [(b"anthropic-version", b"2023-06-01")], "anthropic"),
    ],
)
async def test_a_bug_is_a_logged_json_500(exc, path, headers, shape, caplog):
    async def run():
        raise exc

    with caplog.at_level(logging.ERROR, logger="proxy.http.managed"):
        response = await answered(request(headers, path), run)
    assert response.status_code == 500
    body = json.loads(response.body)
    if shape == "openai":
        assert body["error"]["type"] == "server_error" and body["error"]["code"] == "proxy_error"
    else:
        assert body["type"] == "error" and body["error"]["type"] == "api_error"
    [record] = [r for r in caplog.records if r.name == "proxy.http.managed"]
    assert record.levelno == logging.ERROR and record.exc_info and record.exc_info[1] is exc
