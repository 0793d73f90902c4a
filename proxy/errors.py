"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

import json

from starlette.responses import Response


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> Response:
    return Response(
        json.dumps(error_body(message, type_, code, param)),
        status_code=status,
        media_type="application/json",
    )


class ProxyError(Exception):
    """An error the proxy itself answers with (not one relayed from upstream)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param

    def response(self) -> Response:
        return error_response(self.status, self.message, type_=self.type, code=self.code, param=self.param)

    def body(self) -> dict:
        return error_body(self.message, self.type, self.code, self.param)
