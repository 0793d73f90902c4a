"""The proxy's own errors in each API's shape."""

from __future__ import annotations

import json

from proxy.errors import ProxyError, anthropic_error_event, error_body


def test_openai_shape():
    response = ProxyError(400, "Bad.", code="invalid_body", param="messages").response()
    assert json.loads(response.body) == {
        "error": {"message": "Bad.", "type": "invalid_request_error", "param": "messages", "code": "invalid_body"}
    }


def test_anthropic_shape_and_types_by_status():
    for status, kind in (
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (502, "api_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ):
        response = ProxyError(status, "Why.").response("anthropic")
        assert response.status_code == status
        assert json.loads(response.body) == {"type": "error", "error": {"type": kind, "message": "Why."}}


def test_anthropic_stream_error_event():
    event = anthropic_error_event(error_body("The upstream broke off.", "server_error", "stream_error"))
    assert event == {"type": "error", "error": {"type": "api_error", "message": "The upstream broke off."}}
    assert anthropic_error_event({})["error"]["message"] == "The request failed."
