"""One accepted Responses WebSocket: its frames read, its `response.create` events run in their
lanes, their events written back, its held responses (`chain`), its idle timeout.

Lanes (`stream_id`, OpenAI's multiplexing): the creates of one lane run one after the other in
the order they came (a create sent while its lane's response is in flight waits its turn, as on
OpenAI); different lanes run side by side. A create without `stream_id` is on the connection's
default lane. Events of a response sent with a `stream_id` name it.

Bad frames get an `error` event and the connection goes on: a binary frame, a frame that is not
JSON or not an object, an unknown event type, a frame over `--max-body-bytes` (413, not read),
more than `--max-messages` input items (400), too many creates waiting, or more than
`--max-body-bytes` of memory in the creates waiting and running (429; one create alone is taken
whatever its size, as HTTP takes one body). A frame over ON_LOOP_FRAME is read, and a large body
written, off the event loop (`proxy.offload.cpu_pool`), as HTTP reads a large body: one client's
50 MB frame does not stall the worker's other connections. Frames are read ahead of the one
being handled while they hold at most READ_AHEAD_BYTES (then uvicorn stops reading the socket).
Close codes: 1000 after `--ws-idle-timeout` with nothing running, 1011 when the proxy fails (a
bug; logged). A frame over the server's frame limit closes the connection with 1009 (uvicorn,
before the proxy sees it).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from starlette.types import Message, Receive, Send

from proxy.core import jsonio
from proxy.core.jsonio import footprint
from proxy.errors import Kind, ProxyError
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.responses import check_responses_input
from proxy.http.websocket import events
from proxy.http.websocket.chain import Budget, ConnectionChain
from proxy.http.websocket.dispatch import Upgrade, dispatch, encoded
from proxy.http.ws_protocol import TEXT_BYTES
from proxy.offload.cpu_pool import CPU

log = logging.getLogger("proxy.http.websocket")

MAX_LANES = 16  # lanes running at once on one connection
MAX_WAITING = 32  # creates waiting in all lanes of one connection
FRAMES_QUEUED = 4  # frames read ahead of the one being handled, at most
READ_AHEAD_BYTES = 1024 * 1024  # ... holding at most this much (the one that passes it is read)
ON_LOOP_FRAME = 64 * 1024  # a frame above is parsed, and its memory counted, in the CPU pool
DRAIN_GRACE = 5.0  # after the client has gone: how long its responses may take to stop by themselves
_GONE = object()


@dataclass
class Lane:
    waiting: asyncio.Queue[events.Create] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class Limits:
    max_frame_bytes: int
    idle_timeout: float
    held_responses: int
    max_items: int | None = None  # --max-messages: input items of a create
    held_bytes: int = 1024**3  # --ws-held-bytes: what the worker's connections hold together


def frame_size(frame: Message) -> int:
    payload = frame.get("text") or frame.get(TEXT_BYTES) or frame.get("bytes")
    return len(payload) if payload else 0


class Connection:
    def __init__(
        self,
        upgrade: Upgrade,
        *,
        receive: Receive,
        send: Send,
        limits: Limits,
        budget: Budget | None = None,
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """`upgrade`: what each create takes from the upgrade (`dispatch.Upgrade`); `budget`: the worker's held bytes (`Limits.held_bytes`); `check`: the caller's checks of a
        body the connection answers itself (`proxy.http.caller.Caller.check_body`)."""
        self.upgrade, self._receive, self._send, self.limits = upgrade, receive, send, limits
        self.chain = ConnectionChain(
            limits.held_responses, limits.max_frame_bytes, budget if budget is not None else Budget(limits.held_bytes)
        )
        self.check = check
        self.gone = asyncio.Event()
        self.lanes: dict[str | None, Lane] = {}
        self.waiting = 0
        self.pending = 0  # creates waiting or running
        self.pending_bytes = 0  # ... and the bytes their bodies hold
        self.last_active = time.monotonic()
        self._frames: asyncio.Queue[Any] = asyncio.Queue(FRAMES_QUEUED)
        self._queued_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._send_lock = asyncio.Lock()

    # ------------------------------------------------------------------ sending
    async def send_text(self, text: str) -> None:
        if self.gone.is_set():
            raise OSError("the WebSocket client has gone away")
        async with self._send_lock:
            await self._send({"type": "websocket.send", "text": text})

    async def send_event(self, event: dict[str, Any]) -> None:
        await self.send_text(json.dumps(event, separators=(",", ":")))

    async def close(self, code: int, reason: str = "") -> None:
        if not self.gone.is_set():
            self.gone.set()
            async with self._send_lock:
                await self._send({"type": "websocket.close", "code": code, "reason": reason})

    # ------------------------------------------------------------------ reading
    async def _read(self) -> None:
        """Every frame into `_frames` (one reader: receive is never cancelled), then _GONE."""
        try:
            while True:
                await self._room.wait()  # not reading: uvicorn stops reading the socket
                message: Message = await self._receive()
                if message["type"] == "websocket.disconnect":
                    break
                if message["type"] == "websocket.receive":
                    self._queued_bytes += frame_size(message)
                    if self._queued_bytes > READ_AHEAD_BYTES:
                        self._room.clear()
                    await self._frames.put(message)
        finally:
            self.gone.set()
            await self._frames.put(_GONE)

    def _busy(self) -> bool:
        return any(lane.task is not None and not lane.task.done() for lane in self.lanes.values())

    async def _next_frame(self) -> Any:
        """The next frame; None once the connection has been idle for the idle timeout."""
        while True:
            left = self.limits.idle_timeout - (time.monotonic() - self.last_active)
            try:
                frame = await asyncio.wait_for(self._frames.get(), max(left, 0.001))
            except asyncio.TimeoutError:
                if self._busy():
                    self.last_active = time.monotonic()
                elif time.monotonic() - self.last_active >= self.limits.idle_timeout:
                    return None
                continue
            if frame is not _GONE:
                self._queued_bytes -= frame_size(frame)
                if self._queued_bytes <= READ_AHEAD_BYTES:
                    self._room.set()
            return frame

    async def serve(self) -> None:
        reader = asyncio.create_task(self._read())
        try:
            while True:
                frame = await self._next_frame()
                if frame is _GONE:
                    break
                if frame is None:
                    await self.close(1000, f"idle for {self.limits.idle_timeout:g} s")
                    break
                self.last_active = time.monotonic()
                await self._handle(frame)
        except OSError:
            pass  # the client went away while we wrote to it
        except Exception:  # noqa: BLE001 - a bug: said to the client as 1011, logged
            log.exception("bug: the Responses WebSocket failed")
            await self.close(1011, "the proxy failed on this connection")
        finally:
            self.gone.set()
            await self._stop_lanes()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self.chain.clear()  # its bytes back to the worker's budget

    async def _stop_lanes(self) -> None:
        tasks = [lane.task for lane in self.lanes.values() if lane.task is not None and not lane.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=DRAIN_GRACE)  # each sees its client gone and stops
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, frame: Message) -> None:
        text = frame.get("text")
        if text is None:
            text = frame.get(TEXT_BYTES)  # a large text frame's UTF-8 bytes (proxy.http.ws_protocol)
        if text is None:
            await self.send_event(
                events.error_event(
                    400,
                    "Binary frames are not supported: send each client event as a JSON text frame.",
                    code="unsupported_frame",
                )
            )
            return
        if len(text) > self.limits.max_frame_bytes:  # characters: at least as many bytes
            await self.send_event(
                events.error_event(
                    413,
                    f"A frame exceeds {self.limits.max_frame_bytes} bytes (the proxy's --max-body-bytes).",
                    code="request_too_large",
                )
            )
            return
        try:
            create = await CPU(len(text) > ON_LOOP_FRAME)(
                functools.partial(events.parse, text, max_items=self.limits.max_items)
            )
        except ProxyError as exc:
            await self.send_event(events.from_proxy_error(exc))
            return
        if create is not None:
            await self._enqueue(create)

    async def _enqueue(self, create: events.Create) -> None:
        lane = self.lanes.get(create.stream_id)
        if lane is None and len(self.lanes) >= MAX_LANES:
            await self.send_event(
                events.error_event(
                    429,
                    f"Too many lanes at once on this connection (at most {MAX_LANES} stream_id values with a "
                    "response running or waiting).",
                    code="too_many_requests",
                    stream_id=create.stream_id,
                )
            )
            return
        if self.waiting >= MAX_WAITING or (
            self.pending and self.pending_bytes + create.memory > self.limits.max_frame_bytes
        ):
            await self.send_event(
                events.error_event(
                    429,
                    f"Too many response.create events waiting or running on this connection (at most "
                    f"{MAX_WAITING} waiting, holding {self.limits.max_frame_bytes} bytes of memory together).",
                    code="too_many_requests",
                    stream_id=create.stream_id,
                )
            )
            return
        if lane is None:
            lane = self.lanes[create.stream_id] = Lane()
        self.waiting += 1
        self.pending += 1
        self.pending_bytes += create.memory
        lane.waiting.put_nowait(create)
        if lane.task is None or lane.task.done():
            lane.task = asyncio.create_task(self._run_lane(create.stream_id, lane))

    async def _run_lane(self, stream_id: str | None, lane: Lane) -> None:
        try:
            while not lane.waiting.empty() and not self.gone.is_set():
                create = lane.waiting.get_nowait()
                self.waiting -= 1
                released = False

                def release(memory: int = create.memory) -> None:
                    """Before its last event is sent: the client may send its next create at once."""
                    nonlocal released
                    if not released:
                        released = True
                        self.pending -= 1
                        self.pending_bytes -= memory

                try:
                    await self.respond(create, release)
                finally:
                    release()
                self.last_active = time.monotonic()
        except OSError:
            pass
        except Exception:  # noqa: BLE001 - a bug: said to the client as 1011, logged
            log.exception("bug: a response on the Responses WebSocket failed")
            await self.close(1011, "the proxy failed on this connection")
        finally:
            if self.lanes.get(stream_id) is lane and lane.waiting.empty():
                del self.lanes[stream_id]

    # ------------------------------------------------------------------ one response
    async def respond(self, create: events.Create, release: Callable[[], None] = lambda: None) -> None:
        """Answer one create; `release` is called before its last event is sent."""
        stream_id = create.stream_id
        previous = self.chain.get(create.body.get("previous_response_id"))
        # the whole body's JSON characters and memory, about
        chars = create.size + (previous.chars if previous is not None else 0)
        memory = create.memory + (previous.size if previous is not None else 0)
        try:
            body = self.chain.expand(create.body)
        except ProxyError as exc:
            release()
            await self.send_event(events.from_proxy_error(exc, stream_id))
            return
        if body.get("generate") is False:
            await self._warm_up(body, stream_id, chars=chars, memory=memory, release=release)
            return
        finished: dict[str, Any] | None = None
        finished_chars = finished_memory = 0
        ended = False

        async def on_event(data: str) -> None:
            nonlocal finished, finished_chars, finished_memory, ended
            if any(kind in data for kind in events.TERMINAL):
                try:
                    event, held = await CPU(len(data) > ON_LOOP_FRAME)(_terminal, data)
                except ValueError:
                    event, held = None, 0
                kind = event.get("type") if isinstance(event, dict) else None
                if kind in events.TERMINAL:
                    ended = True
                    release()
                    if kind in ("response.completed", "response.incomplete"):
                        finished = event.get("response") if isinstance(event.get("response"), dict) else None
                        finished_chars, finished_memory = len(data), held
            await self.send_text(events.with_stream_id(data, stream_id))

        large = memory > LARGE_BODY
        content = await CPU(large)(encoded, body, large)
        status, error_body = await dispatch(self.upgrade, content, gone=self.gone, on_event=on_event)
        release()
        if status != 200:
            await self.send_event(events.from_http_answer(status, error_body, stream_id))
        elif finished is not None and isinstance(finished.get("id"), str):
            self.chain.hold(
                finished["id"],
                body,
                finished.get("output"),
                size=memory + finished_memory,
                chars=len(content) + finished_chars,
            )
        elif not ended:
            await self.send_event(
                events.error_event(
                    502,
                    "The response's stream ended before response.completed.",
                    type_="server_error",
                    code="stream_ended",
                    stream_id=stream_id,
                )
            )

    def _check_warm_up(self, body: dict[str, Any], chars: int) -> None:
        """The checks the managed route applies to an HTTP body (ProxyError): its size, its fields'
        types, `--max-messages`, the caller's."""
        if chars > self.limits.max_frame_bytes:
            raise ProxyError(
                Kind.TOO_LARGE,
                f"Request body exceeds {self.limits.max_frame_bytes} bytes (the proxy's --max-body-bytes).",
                code="request_too_large",
            )
        check_responses_input(body, max_items=self.limits.max_items)
        if self.check is not None:
            self.check(body)

    async def _warm_up(
        self, body: dict[str, Any], stream_id: str | None, *, chars: int, memory: int, release: Callable[[], None]
    ) -> None:
        """`generate: false` (a client warming the connection up with its first request's input and
        tools, as Codex may): checked as HTTP checks a body, answered here with an empty response,
        held for the next create to continue, no upstream call."""
        try:
            await CPU(memory > LARGE_BODY)(self._check_warm_up, body, chars)
        except ProxyError as exc:
            release()
            await self.send_event(events.from_proxy_error(exc, stream_id))
            return
        release()
        response_id = f"resp_{secrets.token_hex(24)}"
        response: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model"),
            "output": [],
            "usage": None,
            "error": None,
            "incomplete_details": None,
        }
        for number, kind in enumerate(("response.created", "response.completed")):
            await self.send_text(
                events.with_stream_id(
                    json.dumps({"type": kind, "sequence_number": number, "response": response}, separators=(",", ":")),
                    stream_id,
                )
            )
        self.chain.hold(response_id, body, [], size=memory, chars=chars)


def _terminal(data: str) -> tuple[Any, int]:
    """A terminal event's JSON and the bytes its response's output holds (ValueError: not JSON)."""
    event = jsonio.loads(data)
    response = event.get("response") if isinstance(event, dict) else None
    return event, footprint(response.get("output")) if isinstance(response, dict) else 0
