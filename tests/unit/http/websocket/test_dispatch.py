"""A `response.create` answered as `POST /v1/responses` is, without HTTP: its client headers, its
answer written as events, what follows the answer, and no in-process request through the app."""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import logging
from types import SimpleNamespace
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

from proxy.http.caller import Gatekeeper
from proxy.http.telemetry import Metrics, Recording
from proxy.http.websocket import dispatch as dispatch_module
from proxy.http.websocket.dispatch import Upgrade, body_headers, client_headers, dispatch


def test_the_upgrade_s_own_headers_are_not_the_request_s():
    headers = client_headers(
        [
            (b"host", b"p"),
            (b"connection", b"Upgrade"),
            (b"upgrade", b"websocket"),
            (b"sec-websocket-key", b"k"),
            (b"sec-websocket-version", b"13"),
            (b"sec-websocket-extensions", b"permessage-deflate"),
            (b"Sec-WebSocket-Protocol", b"x"),
            (b"authorization", b"Bearer sk"),
        ]
    )
    assert body_headers(headers, 12) == [
        (b"host", b"p"),
        (b"authorization", b"Bearer sk"),
        (b"content-type", b"application/json"),
        (b"content-length", b"12"),
    ]


def test_the_beta_asking_for_the_websocket_mode_is_left_out_and_other_betas_kept():
    def beta(value: bytes) -> list[bytes]:
        return [v for k, v in client_headers([(b"OpenAI-Beta", value)]) if k == b"OpenAI-Beta"]

    assert beta(b"responses_websockets=2026-02-06") == []
    assert beta(b"assistants=v2, responses_websockets=2026-02-06") == [b"assistants=v2"]
    assert beta(b"assistants=v2") == [b"assistants=v2"]


class NotToBeCalled:
    """The application of the upgrade's scope: a create never goes through it."""

    def __init__(self, services: Any) -> None:
        self.state = SimpleNamespace(services=services)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError(f"a response.create went through the application: {scope.get('type')}")


def _upgrade(finished: list[Any], headers: list[tuple[bytes, bytes]] | None = None) -> Upgrade:
    services = SimpleNamespace(settings=SimpleNamespace(max_body_bytes=1000, admin_token=None))
    gatekeeper = Gatekeeper({}, server_key=None, allow_anonymous=False, upstream_allowlist=[])
    scope = {"type": "websocket", "path": "/v1/responses", "headers": headers or [], "app": NotToBeCalled(services)}
    recording = Recording(Metrics(), lambda rec, seen: finished.append((rec, seen)))
    return Upgrade.of(scope, gatekeeper=gatekeeper, recording=recording)


def test_dispatch_takes_no_application_and_makes_no_http_request():
    assert "app" not in inspect.signature(dispatch).parameters
    assert "app" not in Upgrade.__dataclass_fields__
    source = inspect.getsource(dispatch_module)
    assert '"http.request"' not in source and "ASGIApp" not in source and '"type": "http"' not in source


def test_a_refused_credential_is_answered_and_recorded_as_the_post_would_be():
    finished: list[Any] = []

    async def main() -> tuple[int, bytes]:
        return await dispatch(_upgrade(finished), b"{}", gone=asyncio.Event(), on_event=lambda data: asyncio.sleep(0))

    status, body = asyncio.run(main())
    assert status == 401 and json.loads(body)["error"]["code"]  # the caller gate's refusal, as HTTP answers it
    [(rec, seen)] = finished
    assert (rec.route, rec.method, rec.path, rec.status, rec.transport) == (
        "responses",
        "POST",
        "/v1/responses",
        401,
        "websocket",
    )
    assert seen["path"] == "/v1/responses" and "caller" not in seen["state"]


def test_a_body_over_the_limit_is_a_413_as_over_http():
    async def main() -> tuple[int, bytes]:
        return await dispatch(_upgrade([]), b"x" * 1001, gone=asyncio.Event(), on_event=lambda data: asyncio.sleep(0))

    status, body = asyncio.run(main())
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"


def _answer(after: list[str], *, fail_after: bool = False):
    async def events():
        yield b'data: {"type":"response.completed"}\n\n'
        await asyncio.sleep(0.01)  # the client reads the last event and leaves before the end

    async def following() -> None:
        await asyncio.sleep(0)
        if fail_after:
            raise RuntimeError("what follows the answer failed")
        after.append("statistics recorded")

    async def answer_to(*args: Any, **kwargs: Any) -> StreamingResponse:
        return StreamingResponse(events(), media_type="text/event-stream", background=BackgroundTask(following))

    return answer_to


def test_a_client_gone_after_the_last_event_lets_the_route_finish_what_follows_it(caplog, monkeypatch):
    after: list[str] = []
    events: list[str] = []
    finished: list[Any] = []
    monkeypatch.setattr(dispatch_module, "answer_to", _answer(after))

    async def main() -> tuple[int, bytes]:
        gone = asyncio.Event()

        async def on_event(data: str) -> None:
            events.append(data)
            gone.set()

        answer = await dispatch(_upgrade(finished), b"{}", gone=gone, on_event=on_event)
        for _ in range(20):
            await asyncio.sleep(0.01)
        gc.collect()
        return answer

    with caplog.at_level(logging.DEBUG):
        assert asyncio.run(main()) == (200, b"")
    assert events == ['{"type":"response.completed"}'] and after == ["statistics recorded"]
    assert [rec.status for rec, _ in finished] == [200]  # recorded once what follows has run
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_route_failing_after_its_answer_is_logged_as_its_failure_not_as_an_unretrieved_task(caplog, monkeypatch):
    monkeypatch.setattr(dispatch_module, "answer_to", _answer([], fail_after=True))

    async def main() -> None:
        await dispatch(_upgrade([]), b"{}", gone=asyncio.Event(), on_event=lambda data: asyncio.sleep(0))
        for _ in range(20):
            await asyncio.sleep(0.01)
        gc.collect()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.getMessage()) for r in errors] == [("proxy.http.websocket", "a response.create's route failed")]
    assert "what follows the answer failed" in str(errors[0].exc_info[1])


def test_a_client_gone_mid_answer_stops_the_stream(monkeypatch):
    closed: list[str] = []

    async def events():
        try:
            yield b'data: {"type":"response.created"}\n\n'
            await asyncio.sleep(30)  # the upstream's next event, never waited for
            yield b'data: {"type":"response.completed"}\n\n'
        finally:
            closed.append("the stream stopped")

    async def answer_to(*args: Any, **kwargs: Any) -> StreamingResponse:
        return StreamingResponse(events(), media_type="text/event-stream")

    monkeypatch.setattr(dispatch_module, "answer_to", answer_to)

    async def main() -> tuple[int, bytes]:
        gone = asyncio.Event()

        async def on_event(data: str) -> None:
            gone.set()

        return await asyncio.wait_for(dispatch(_upgrade([]), b"{}", gone=gone, on_event=on_event), 5)

    assert asyncio.run(main()) == (200, b"")
    assert closed == ["the stream stopped"]
