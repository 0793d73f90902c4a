"""POST /v1/chat/completions: parse, offload, forward, relay."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from proxy.disconnect import ClientDisconnected, ClientWatch
from proxy.errors import ProxyError, error_response
from proxy.headers import request_headers_for_upstream
from proxy.relay import stream_back
from proxy.upstream import Upstream


def parse_chat_body(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProxyError(400, f"Request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise ProxyError(400, "Request body must be a JSON object.", code="invalid_json")
    return body


async def chat_completions(request: Request) -> Response:
    upstream: Upstream = request.app.state.upstream
    raw = await request.body()
    try:
        parse_chat_body(raw)
        watch = ClientWatch(request, body_read=True)
        response = await watch.run(
            upstream.send(
                "POST",
                "chat/completions",
                query=request.scope.get("query_string", b""),
                headers=request_headers_for_upstream(request.scope["headers"]),
                content=raw,
            )
        )
    except ProxyError as exc:
        return exc.response()
    except ClientDisconnected:
        return error_response(499, "Client closed the request.")
    return stream_back(response)
