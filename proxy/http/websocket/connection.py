"""The upgrade: `GET /v1/responses` (or `/responses`) asking for a WebSocket.

The upgrade request's headers decide who is calling with the rules of every HTTP request
(`proxy.http.caller`: credential, proxy key, `X-Offload-Tenant`; the `X-Offload-*` settings
headers, as `proxy.http.call_parts.request_settings` reads them); a caller HTTP would refuse is
refused before the connection is accepted, with the HTTP status and error body HTTP would answer
(a WebSocket client, Codex among them, reads it as the failed request it is). So is a tenant
(its key or credential as a whole) that already holds `--ws-connections-per-tenant` connections
in this worker: 429, `too_many_connections`; so is any upgrade once the worker holds
`--ws-connections` in all (a made-up credential is only checked by the upstream at its first
`response.create`, so a count per credential alone would not bound idle connections). An
upgrade carrying `Origin` is refused (403 `origin_not_allowed`): only a browser sends one, and
browsers apply no cross-origin check to WebSockets, so a page could otherwise reach the proxy
(and the operator's key, with `--allow-anonymous`) from the user's machine; SDKs and agent CLIs
send none. Each `response.create` then goes through the same caller gate again, with the same
headers (`proxy.http.websocket.dispatch`). Unknown `X-Offload-*` headers are named in the 101's
`X-Offload-Warning` (`proxy.http.headers`).

One accepted Responses WebSocket: its frames read, its `response.create` events run in their
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

The responses one WebSocket connection holds, so that `previous_response_id` with
`store: false` continues them, as OpenAI's WebSocket mode does with its connection-local state.

A response is held once its `response.completed` (or `response.incomplete`) has been sent: its
whole input as the proxy received it (the held history it continued, then the new input) and
its output items. A `response.create` naming one is expanded into the whole history before the
managed turn runs (`previous_response_id` taken out), so the proxy always manages the whole
history, exactly as if the client had sent it over HTTP. The output items go back as input as
the response gave them (`input += response.output`, OpenAI's way of carrying a `store: false`
conversation; Codex resends them with their ids too).

At most `limit` responses are held, and at most `max_bytes` of memory for them together, each
counted as what its whole input and output hold once parsed (`proxy.core.jsonio`: 446,000
small items are 13 MB of JSON and 110 MB of objects; characters would undercount them 8 x);
the least recently used is forgotten first (a continuation of it is then
`previous_response_not_found`, and the client sends its full input, as it must on OpenAI). A
response larger than `max_bytes` on its own is not held. Continued histories share their items
with the responses they continue, so a chain of held responses costs about one history in
memory (the count is cautious: it counts each one whole).

The worker's connections together hold at most `Budget.capacity` bytes (`--ws-held-bytes`):
a response that does not fit forgets this connection's oldest first, and is not held when it
still does not fit (its continuation is then `previous_response_not_found`). So 1,024
connections of 64 MiB each cannot hold 64 GiB.

A response answering a `compaction_trigger` (Codex's remote compaction: the input ends in
`{"type": "compaction_trigger"}`, the output is one `compaction` item) is held without its
trigger: the trigger asks for a compaction now, it is no part of the history, and it must be the
last input item wherever it appears. Its continuation is then the history, the compaction item,
the new items: the newest compaction item supersedes what precedes it (the client's system and
developer messages kept), as it does in any input (docs/offloading.md), so the upstream sees the
summary the item stands for, then the new items; relayed, the provider reads its own item the
same way."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from proxy.core import jsonio
from proxy.core.jsonio import footprint
from proxy.core.settings import SettingsResolver
from proxy.errors import Kind, ProxyError
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.responses import TYPE as TRIGGER
from proxy.formats.responses import check_responses_input
from proxy.http.caller import Caller, Gatekeeper
from proxy.http.error_map import error_response, response_of
from proxy.http.headers import unknown_in, with_warning
from proxy.http.telemetry import Recording
from proxy.http.websocket import wire as events
from proxy.http.websocket.dispatch import Upgrade, dispatch, encoded
from proxy.http.websocket.wire import TEXT_BYTES
from proxy.offload.cpu_pool import CPU

log = logging.getLogger("proxy.http.websocket")


class OpenConnections:
    """How many WebSockets each tenant (a caller's `scope`) holds open in this worker."""

    def __init__(self, limit: int, total: int = 0) -> None:
        self.limit, self.total = limit, total  # 0: no limit
        self._open: Counter[str] = Counter()
        self._count = 0

    def take(self, scope: str) -> str | None:
        """Count one more for `scope`; or why it may not open one more (nothing counted)."""
        if self.total and self._count >= self.total:
            return (
                f"This proxy worker already holds {self.total} WebSocket connections (--ws-connections): "
                "try again later, or use POST /v1/responses."
            )
        if self.limit and self._open[scope] >= self.limit:
            return (
                f"This tenant already holds {self.limit} WebSocket connections to this proxy worker "
                "(--ws-connections-per-tenant): close one, or use POST /v1/responses."
            )
        self._open[scope] += 1
        self._count += 1
        return None

    def give_back(self, scope: str) -> None:
        self._count -= 1
        self._open[scope] -= 1
        if self._open[scope] <= 0:
            del self._open[scope]

    def __len__(self) -> int:
        return self._count


class ResponsesSocket:
    """The ASGI endpoint of the WebSocket route; every response.create is answered with the
    caller gate and the request recording `POST /v1/responses` has (`recording`, the app's own
    kind: `proxy.http.telemetry.Recording`), by its route called directly (`dispatch`)."""

    def __init__(
        self,
        gatekeeper: Gatekeeper,
        resolver: SettingsResolver,
        limits: Limits,
        *,
        recording: Recording,
        per_tenant: int,
        total: int = 0,
    ) -> None:
        self.gatekeeper, self.resolver, self.limits, self.recording = gatekeeper, resolver, limits, recording
        self.open = OpenConnections(per_tenant, total)
        self.held = Budget(limits.held_bytes)  # what all connections of this worker hold

    def _caller(self, headers: Headers) -> Caller:
        """Who calls, its `X-Offload-*` headers checked: the refusals of every HTTP request
        (401, 403, 400 `invalid_offload_header`), here once for the whole connection; a browser's
        upgrade (it carries `Origin`) refused first."""
        if "origin" in headers:
            raise ProxyError(
                Kind.PERMISSION_DENIED,
                "WebSocket upgrades from a browser (an Origin header) are not served: use the "
                "Responses API over HTTP, or a client that sends no Origin.",
                code="origin_not_allowed",
            )
        caller = self.gatekeeper.identify(headers, "openai")
        self.resolver.resolve(headers, tenant=caller.tenant)  # SettingsError: a refused header
        return caller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = self._caller(Headers(scope=scope))
        except ProxyError as exc:
            await _refuse(scope, receive, send, response=response_of(exc), code=1008, reason=exc.message)
            return
        message = self.open.take(caller.scope)
        if message is not None:
            refusal = error_response(429, message, type_="rate_limit_error", code="too_many_connections")
            await _refuse(scope, receive, send, response=refusal, code=1013, reason="too many connections")
            return
        try:
            first = await receive()
            if first["type"] != "websocket.connect":
                return
            found = unknown_in(scope["headers"])  # said in the 101; counted per response.create
            await send({"type": "websocket.accept", "headers": with_warning([], found.warning()) if found else []})
            upgrade = Upgrade.of(scope, gatekeeper=self.gatekeeper, recording=self.recording)
            await Connection(
                upgrade, receive=receive, send=send, limits=self.limits, budget=self.held, check=caller.check_body
            ).serve()
        finally:
            self.open.give_back(caller.scope)


async def _refuse(scope: Scope, receive: Receive, send: Send, *, response: Response, code: int, reason: str) -> None:
    """Before accepting: the HTTP answer itself where the server can send one (uvicorn can), else
    a close with `code` (1008 policy, 1013 try again later)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await response(scope, receive, send)  # starlette sends it as websocket.http.response.*
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.close", "code": code, "reason": reason[:120]})


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
            text = frame.get(TEXT_BYTES)  # a large text frame's UTF-8 bytes (proxy.http.websocket.wire)
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


@dataclass(frozen=True)
class Held:
    input: list[Any]  # the whole input this response answered
    output: list[Any]  # its output items, as input items
    store: bool  # the request's `store` (OpenAI's default: true)
    size: int  # bytes its input and output hold (proxy.core.jsonio)
    chars: int = 0  # characters of their JSON, about (what a continuation sends again)


def as_input(items: Any) -> list[Any]:
    """A response's output items as they go back in an input."""
    return list(items) if isinstance(items, list) else []


def input_items(body: dict[str, Any]) -> list[Any]:
    """A request's `input` as a list of items (a string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def history_of(items: list[Any]) -> list[Any]:
    """A held response's input as the history its continuation goes on from: without a trailing
    `compaction_trigger`."""
    if items and isinstance(items[-1], dict) and items[-1].get("type") == TRIGGER:
        return items[:-1]
    return items


class Budget:
    """The bytes one worker's WebSocket connections hold in responses, together."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0

    def take(self, size: int) -> bool:
        if self.used + size > self.capacity:
            return False
        self.used += size
        return True

    def give_back(self, size: int) -> None:
        self.used -= size


class ConnectionChain:
    def __init__(self, limit: int, max_bytes: int, budget: Budget | None = None) -> None:
        self.limit, self.max_bytes = limit, max_bytes
        self.budget = budget if budget is not None else Budget(max_bytes)
        self._held: OrderedDict[str, Held] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._held

    def get(self, response_id: object) -> Held | None:
        return self._held.get(response_id) if isinstance(response_id, str) else None

    def size_of(self, response_id: object) -> int:
        """The bytes a held response holds (0 for one not held)."""
        held = self.get(response_id)
        return held.size if held is not None else 0

    def expand(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with a held `previous_response_id` replaced by the whole history it stands for.
        An id this connection does not hold: left to the managed turn when the chain is stored
        upstream (`store` not false: the upstream, or the proxy's stored chain, knows it), else
        ProxyError `previous_response_not_found`."""
        previous = body.get("previous_response_id")
        if previous is None:
            return body
        held = self._held.get(previous) if isinstance(previous, str) else None
        if held is None:
            if body.get("store") is False:
                shown = previous[:200] if isinstance(previous, str) else type(previous).__name__
                raise ProxyError(
                    Kind.BAD_REQUEST,
                    f"Previous response with id '{shown}' not found on this WebSocket connection "
                    "(with store: false only responses created on the same connection can be "
                    "continued, and it holds the last few only): send the full input without "
                    "previous_response_id.",
                    code="previous_response_not_found",
                    param="previous_response_id",
                )
            return body
        self._held.move_to_end(previous)
        rest = {k: v for k, v in body.items() if k != "previous_response_id"}
        rest["input"] = [*held.input, *held.output, *input_items(body)]
        return rest

    def hold(self, response_id: str, body: dict[str, Any], output: Any, *, size: int, chars: int = 0) -> bool:
        """Remember a finished response: `body` as expanded (its whole input), `output` its items,
        `size` the bytes both hold (`proxy.core.jsonio`), `chars` their JSON's length. False when it is not held (larger
        than `max_bytes`, or no room left in the worker's budget)."""
        self._forget(response_id)
        if size > self.max_bytes:
            return False
        while self._held and (len(self._held) >= self.limit or self.bytes + size > self.max_bytes):
            self._forget(next(iter(self._held)))
        while not self.budget.take(size):
            if not self._held:
                return False
            self._forget(next(iter(self._held)))
        self._held[response_id] = Held(
            history_of(input_items(body)), as_input(output), body.get("store") is not False, size, chars
        )
        self.bytes += size
        return True

    def clear(self) -> None:
        """Forget every response (the connection has closed): their bytes back to the budget."""
        while self._held:
            self._forget(next(iter(self._held)))

    def _forget(self, response_id: str) -> None:
        held = self._held.pop(response_id, None)
        if held is not None:
            self.bytes -= held.size
            self.budget.give_back(held.size)
