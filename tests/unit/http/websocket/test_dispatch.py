"""The in-process `POST /v1/responses` a `response.create` becomes: its headers."""

from __future__ import annotations

import asyncio
import gc
import logging

from proxy.http.websocket.dispatch import dispatch, request_scope


def upgrade(*headers: tuple[bytes, bytes]) -> dict:
    return {"type": "websocket", "path": "/v1/responses", "headers": list(headers), "scheme": "ws"}


def test_the_upgrade_s_own_headers_are_not_the_request_s():
    scope = request_scope(
        upgrade(
            (b"host", b"p"),
            (b"connection", b"Upgrade"),
            (b"upgrade", b"websocket"),
            (b"sec-websocket-key", b"k"),
            (b"sec-websocket-version", b"13"),
            (b"sec-websocket-extensions", b"permessage-deflate"),
            (b"Sec-WebSocket-Protocol", b"x"),
            (b"authorization", b"Bearer sk"),
        ),
        12,
    )
    assert scope["headers"] == [
        (b"host", b"p"),
        (b"authorization", b"Bearer sk"),
        (b"content-type", b"application/json"),
        (b"content-length", b"12"),
    ]


def test_the_beta_asking_for_the_websocket_mode_is_left_out_and_other_betas_kept():
    def beta(value: bytes) -> list[bytes]:
        return [v for k, v in request_scope(upgrade((b"OpenAI-Beta", value)), 1)["headers"] if k == b"OpenAI-Beta"]

    assert beta(b"responses_websockets=2026-02-06") == []
    assert beta(b"assistants=v2, responses_websockets=2026-02-06") == [b"assistants=v2"]
    assert beta(b"assistants=v2") == [b"assistants=v2"]


def _streaming_app(after: list[str], *, fail_after: bool = False):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send(
            {"type": "http.response.body", "body": b'data: {"type":"response.completed"}\n\n', "more_body": True}
        )
        await asyncio.sleep(0.01)  # the client reads the last event and leaves before the end
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        await asyncio.sleep(0)
        if fail_after:
            raise RuntimeError("what follows the answer failed")
        after.append("statistics recorded")

    return app


def test_a_client_gone_after_the_last_event_lets_the_route_finish_what_follows_it(caplog):
    after: list[str] = []
    events: list[str] = []

    async def main() -> tuple[int, bytes]:
        gone = asyncio.Event()

        async def on_event(data: str) -> None:
            events.append(data)
            gone.set()

        answer = await dispatch(_streaming_app(after), upgrade(), b"{}", gone=gone, on_event=on_event)
        for _ in range(20):
            await asyncio.sleep(0.01)
        gc.collect()
        return answer

    with caplog.at_level(logging.DEBUG):
        assert asyncio.run(main()) == (200, b"")
    assert events == ['{"type":"response.completed"}'] and after == ["statistics recorded"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_route_failing_after_its_answer_is_logged_as_its_failure_not_as_an_unretrieved_task(caplog):
    async def main() -> None:
        await dispatch(
            _streaming_app([], fail_after=True),
            upgrade(),
            b"{}",
            gone=asyncio.Event(),
            on_event=lambda data: asyncio.sleep(0),
        )
        for _ in range(20):
            await asyncio.sleep(0.01)
        gc.collect()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.getMessage()) for r in errors] == [("proxy.http.websocket", "a response.create's route failed")]
    assert "what follows the answer failed" in str(errors[0].exc_info[1])
