"""The table mapping the upstream's failures to the proxy's errors."""

from __future__ import annotations

import httpx2
import pytest

from proxy.http.error_map import body_of, status_of
from proxy.upstream.errors import UPSTREAM_ERRORS, stream_broke, upstream_error


@pytest.mark.parametrize(
    "exc, status, code",
    [
        (httpx2.ConnectTimeout("x"), 504, "upstream_timeout"),
        (httpx2.ReadTimeout("x"), 504, "upstream_timeout"),
        (httpx2.PoolTimeout("x"), 504, "upstream_timeout"),
        (httpx2.ConnectError("x"), 502, "upstream_unreachable"),
        (httpx2.RemoteProtocolError("x"), 502, "upstream_unreachable"),
        (httpx2.ReadError("x"), 502, "upstream_unreachable"),
        (httpx2.DecodingError("x"), 502, "upstream_error"),
        (ValueError("x"), 502, "upstream_error"),
    ],
)
def test_each_failure_maps_to_one_status_and_code(exc, status, code):
    error = upstream_error(exc)
    assert (status_of(error), error.code, body_of(error)["error"]["type"]) == (status, code, "server_error")
    assert type(exc).__name__ in error.message
    event = stream_broke(exc)["error"]
    assert event["code"] == ("upstream_timeout" if code == "upstream_timeout" else "upstream_error")


def test_rows_go_from_specific_to_general():
    kinds = [kind for kind, *_ in UPSTREAM_ERRORS]
    for i, kind in enumerate(kinds):
        assert not any(issubclass(kind, earlier) for earlier in kinds[:i]), kind  # a row never shadowed


def test_the_upstream_is_named_by_host_and_port_only():
    from proxy.upstream.errors import host_of, response_host

    url = httpx2.URL("https://user:pw@api.example.com:8443/v1/chat?key=secret")
    assert (
        host_of(url) == "api.example.com:8443"
        and host_of(httpx2.URL("https://api.example.com/v1")) == "api.example.com"
    )
    error = upstream_error(httpx2.ConnectError("x"), host_of(url))
    assert error.message == "Upstream unreachable at api.example.com:8443 (ConnectError)."
    assert (
        stream_broke(httpx2.ReadTimeout("x"), "h:1")["error"]["message"]
        == "The upstream stream at h:1 broke off (ReadTimeout)."
    )
    response = httpx2.Response(200)
    assert response_host(response) is None
    response.request = httpx2.Request("GET", url)
    assert response_host(response) == "api.example.com:8443"
