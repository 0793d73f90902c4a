"""A plain `websockets` client of the proxy's Responses WebSocket mode, for the tests.

`Socket(proxy_url, key)` opens `ws://…/v1/responses` with `Authorization: Bearer <key>` (and any
other headers); `create(**body)` sends one `response.create` and returns the events up to the
response's last one (`response.completed`, `.incomplete`, `.failed`, or an `error`);
`events()` reads on. The sync client of the `websockets` package, unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from websockets.sync.client import ClientConnection, connect

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def ws_url(proxy_url: str, path: str = "/v1/responses") -> str:
    return proxy_url.replace("http://", "ws://", 1) + path


class Socket:
    def __init__(
        self,
        proxy_url: str,
        key: str | None = "sk-test-key",
        *,
        path: str = "/v1/responses",
        headers: dict[str, str] | None = None,
        timeout: float = 20,
    ) -> None:
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        self.timeout = timeout
        self.ws: ClientConnection = connect(
            ws_url(proxy_url, path), additional_headers=sent, open_timeout=timeout, max_size=None
        )

    def __enter__(self) -> "Socket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.ws.close()

    def send(self, event: dict | str | bytes) -> None:
        self.ws.send(event if isinstance(event, (str, bytes)) else json.dumps(event))

    def recv(self) -> dict:
        return json.loads(self.ws.recv(timeout=self.timeout))

    def events(self) -> list[dict]:
        """Events up to and including the next terminal one."""
        got = []
        while True:
            event = self.recv()
            got.append(event)
            if event["type"] in TERMINAL:
                return got

    def create(self, **body: Any) -> list[dict]:
        body.setdefault("model", "gpt-5")
        self.send({"type": "response.create", **body})
        return self.events()


def completed(events: list[dict]) -> dict:
    """The response of a `response.completed` event (the last of `events`)."""
    assert events[-1]["type"] == "response.completed", events[-1]
    return events[-1]["response"]


def texts(response: dict) -> list[str]:
    return [
        part["text"]
        for item in response["output"]
        if item.get("type") == "message"
        for part in item["content"]
        if part.get("type") == "output_text"
    ]
