"""Responses the proxy writes itself."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.responses import Response

from proxy.core import jsonio as large_json
from proxy.core.jsonio import dumps
from proxy.offload.cpu_pool import CPU


class JSONResponse(_StarletteJSONResponse):
    """Starlette's JSONResponse, encoded by `jsonio.dumps`: content with a lone surrogate
    (Starlette's own encoder fails on it) goes out escaped, and large bodies are encoded faster."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


async def json_answer(content: Any, *, cpu: CPU) -> Response:
    """A JSONResponse of `content`; written in the CPU pool, a piece at a time
    (`large_json.dumps_yielding`), when `cpu` is large (tens of MB take a good part of a second)."""
    if not cpu.large:
        return JSONResponse(content)
    return Response(await cpu(large_json.dumps_yielding, content), media_type="application/json")
