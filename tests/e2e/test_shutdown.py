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
    proxy = ProxyProcess(
        "--upstream", f"{upstream_url}/v1", "--shutdown-grace", str(grace), "--log-level", "warning", data_dir=tmp_path
    ).start()
    return proxy.proc, proxy.url


# Either way the process ends within `exits_within` (a hang guard, far from both): a stream done
# long before the grace ends the process at once (not at the grace's end), and one running far
# past it is cut at the grace (not when it ends).
@pytest.mark.parametrize("grace,stream_seconds,completes", [(120, 1.5, True), (0.5, 300, False)])
def test_sigterm_lets_streams_finish_within_grace(upstream, tmp_path, grace, stream_seconds, completes):
    exits_within = 60
    upstream.handler = slow_stream(stream_seconds)
    proc, url = start_proxy(upstream.url, tmp_path, grace)
    received: list[bytes] = []
    started = threading.Event()
    outcome: dict = {}

    def consume():
        try:
            with httpx2.stream(
                "POST",
                f"{url}/v1/chat/completions",
                json=BODY,
                timeout=60,
                headers={"authorization": "Bearer sk-test-key"},
            ) as r:
                for part in r.iter_raw():
                    received.append(part)
                    started.set()
        except httpx2.HTTPError as exc:
            outcome["error"] = exc
        started.set()

    reader = threading.Thread(target=consume)
    reader.start()
    assert started.wait(30)
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + exits_within
    while proc.poll() is None:  # no new requests once shutting down
        try:
            httpx2.get(f"{url}/healthz", timeout=1)
        except httpx2.TransportError:
            break
        assert time.monotonic() < deadline, "still accepting requests after SIGTERM"
        time.sleep(0.05)
    proc.wait(timeout=exits_within)
    reader.join(30)
    finished = b"".join(received).rstrip().endswith(b"data: [DONE]")
    assert finished is completes
