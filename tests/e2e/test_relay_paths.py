"""The relay never leaves the upstream's /v1: any dot-segment in the path is a 400."""

from __future__ import annotations

import pytest

from tests.harness import rawhttp

AUTH = {"Authorization": "Bearer sk-paths"}

ESCAPES = [
    "/v1/../secret",
    "/v1/x/../../y",
    "/v1/models/..",
    "/v1/./models",
    "/v1/%2e%2e/secret",
    "/v1/%2E%2e/secret",
    "/v1/x/%2E%2e/%2e%2E/secret",
    "/v1/x%2f..%2f..%2fsecret",
    "/v1/x%2F%2e%2e%2F%2E%2E%2Fsecret",
    "/v1/..%5csecret",
    "/v1/x%5C..%5C..%5Csecret",
    "/v1/x\\..\\..\\secret",
    "/v1/%252e%252e/secret",
    "/v1/..;/secret",
    "/v1/files/..?purpose=x",
]


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_dot_segments_are_refused_before_reaching_the_upstream(proxy_url, upstream, path, method):
    r = rawhttp.send(proxy_url, method, path, AUTH, b'{"x": 1}' if method == "POST" else b"")
    assert r.status == 400, (r.status, r.body)
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "invalid_path" and error["type"] == "invalid_request_error"
    assert upstream.requests == []


@pytest.mark.parametrize(
    "path,received",
    [
        ("/v1/models/a..b", "/v1/models/a..b"),
        ("/v1/files/file-%2e%2e1/content", "/v1/files/file-..1/content"),
        ("/v1/models/.hidden", "/v1/models/.hidden"),
    ],
)
def test_names_with_dots_are_relayed(proxy_url, upstream, path, received):
    r = rawhttp.send(proxy_url, "GET", path, AUTH)
    assert r.status == 200, r.body
    assert [rec.path for rec in upstream.requests] == [received]
