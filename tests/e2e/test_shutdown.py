"""SIGTERM: stop accepting, let in-flight streams finish within the grace period."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import httpx2
import pytest
from starlette.responses import StreamingResponse

from tests.harness.servers import ProxyProcess, stream_chunks

BODY = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def slow_stream(seconds: float):
    chunks = stream_chunks(" ".join(f"w{i}" for i in range(10)))

    async def body():
        for chunk in chunks:
            yield chunk
            await asyncio.sleep(seconds / len(chunks))

    async def handler(request, rec):
        return StreamingResponse(body(), media_type="text/event-stream")

    return handler


def start_proxy(upstream_url: str, tmp_path, grace: float):
    proxy = ProxyProcess("--upstream", f"{upstream_url}/v1", "--shutdown-grace", str(grace), "--log-level", "warning",
                         data_dir=tmp_path).start()
    return proxy.proc, proxy.url


@pytest.mark.parametrize("grace,stream_seconds,completes", [(10, 1.5, True), (0.5, 6, False)])
def test_sigterm_lets_streams_finish_within_grace(upstream, tmp_path, grace, stream_seconds, completes):
    upstream.handler = slow_stream(stream_seconds)
    proc, url = start_proxy(upstream.url, tmp_path, grace)
    received: list[bytes] = []
    started = threading.Event()
    outcome: dict = {}

    def consume():
        try:
            with httpx2.stream("POST", f"{url}/v1/chat/completions", json=BODY, timeout=20,
                               headers={"authorization": "Bearer sk-test-key"}) as r:
                for part in r.iter_raw():
                    received.append(part)
                    started.set()
        except httpx2.HTTPError as exc:
            outcome["error"] = exc
        started.set()

    reader = threading.Thread(target=consume)
    reader.start()
    assert started.wait(10)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    with pytest.raises(httpx2.TransportError):  # no new requests once shutting down
        httpx2.get(f"{url}/healthz", timeout=1)
    proc.wait(timeout=grace + 10)
    took = time.monotonic() - sent
    reader.join(10)
    finished = b"".join(received).rstrip().endswith(b"data: [DONE]")
    assert finished is completes
    if completes:
        assert took < grace
    else:
        assert took < grace + 3
