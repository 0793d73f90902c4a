"""What of the client's headers goes upstream."""

from __future__ import annotations

from proxy.http.headers import request_headers_for_upstream


def test_no_x_offload_header_goes_upstream_in_any_spelling_and_the_rest_goes_as_sent():
    raw = [
        (b"X-Offload-Mode", b"observe"),
        (b"X-OFFLOAD-FOO", b"1"),
        (b"x_offload_session", b"leak"),
        (b"X_Offload-Tenant", b"t"),
        (b"x-offloaded", b"kept"),
        (b"x_other", b"kept"),
        (b"Authorization", b"Bearer sk "),
        (b"Host", b"proxy"),
        (b"Connection", b"keep-alive"),
    ]
    assert request_headers_for_upstream(raw) == [
        (b"x-offloaded", b"kept"),
        (b"x_other", b"kept"),
        (b"Authorization", b"Bearer sk"),
    ]
