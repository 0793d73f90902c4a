"""An upstream answer in a content coding the proxy cannot read beside its relay (a corrupt
gzip body, or one inflating past what is kept to read its bill and ending): the client gets the
upstream's bytes and status whole, in every path that reads them (managed, observe mode, a
holdout's control arm); only the bill and the ending go unread."""

from __future__ import annotations

import gzip
import uuid

import httpx2
import pytest
from starlette.responses import Response

from proxy.http.accounting import KEPT_BYTES
from tests.e2e.test_holdout import sessions_in

GOOD = gzip.compress(
    b'{"id": "c", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", '
    b'"message": {"role": "assistant", "content": "hi"}}]}'
)
CORRUPT = GOOD[:-12]  # its end cut off: no gzip decoder can finish it
BOMB = gzip.compress(b'{"choices": [], "pad": "' + b" " * (KEPT_BYTES + 1024) + b'"}')  # 16 MiB of spaces: 16 KiB sent


@pytest.mark.parametrize("raw", [CORRUPT, BOMB], ids=["corrupt", "bomb"])
@pytest.mark.parametrize("path", ["managed", "off", "observe", "control"])
def test_an_unreadable_encoded_answer_reaches_the_client_as_sent(make_proxy, upstream, path, raw):
    async def handler(request, rec):
        return Response(raw, headers={"content-encoding": "gzip", "content-type": "application/json"})

    upstream.handler = handler
    key = f"sk-{uuid.uuid4().hex}"
    headers = {"authorization": f"Bearer {key}", "accept-encoding": "gzip"}
    options = {"holdout": 0.5} if path == "control" else {}
    with make_proxy(**options) as url:
        namespace = httpx2.get(f"{url}/v1/offload/stats", headers=headers, timeout=10).json()["tenant"]
        if path in ("off", "observe"):
            headers["X-Offload-Mode"] = path
        if path == "control":
            headers["X-Offload-Session"] = sessions_in(namespace, 0.5, "control", 1)[0]
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": False}
        with httpx2.Client(timeout=30) as client:
            with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                got = b"".join(r.iter_raw())
        assert r.status_code == 200 and got == raw, got[:300]
