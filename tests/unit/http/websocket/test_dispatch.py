"""The in-process `POST /v1/responses` a `response.create` becomes: its headers."""

from __future__ import annotations

from proxy.http.websocket.dispatch import request_scope


def upgrade(*headers: tuple[bytes, bytes]) -> dict:
    return {"type": "websocket", "path": "/v1/responses", "headers": list(headers), "scheme": "ws"}


def test_the_upgrade_s_own_headers_are_not_the_request_s():
    scope = request_scope(upgrade((b"host", b"p"), (b"connection", b"Upgrade"), (b"upgrade", b"websocket"),
                                  (b"sec-websocket-key", b"k"), (b"sec-websocket-version", b"13"),
                                  (b"sec-websocket-extensions", b"permessage-deflate"),
                                  (b"Sec-WebSocket-Protocol", b"x"), (b"authorization", b"Bearer sk")), 12)
    assert scope["headers"] == [(b"host", b"p"), (b"authorization", b"Bearer sk"),
                                (b"content-type", b"application/json"), (b"content-length", b"12")]


def test_the_beta_asking_for_the_websocket_mode_is_left_out_and_other_betas_kept():
    def beta(value: bytes) -> list[bytes]:
        return [v for k, v in request_scope(upgrade((b"OpenAI-Beta", value)), 1)["headers"] if k == b"OpenAI-Beta"]

    assert beta(b"responses_websockets=2026-02-06") == []
    assert beta(b"assistants=v2, responses_websockets=2026-02-06") == [b"assistants=v2"]
    assert beta(b"assistants=v2") == [b"assistants=v2"]
