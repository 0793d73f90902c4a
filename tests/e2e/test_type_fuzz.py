"""Type confusion, exhaustively: every field the proxy reads (and every field of a few realistic
bodies) replaced by every JSON type, over the three formats and `/v1/messages/count_tokens`.

The bodies offload (large tool outputs: compaction and the reload tools), summarise inline and
in the background (long histories, `X-Offload-Mode: compress`), stream and not. Whatever the
value, the proxy answers 200 or a 4xx in the endpoint's shape: never a 5xx, never a traceback
or an ERROR record in its log. Deterministic (seeded); the counts are printed (`-s`)."""

from __future__ import annotations

import collections
import json
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import orjson
import pytest
import respx

from tests.e2e.test_anthropic_compression import conversation
from tests.harness import anthropic as fake_anthropic
from tests.harness import responses as fake_responses
from tests.harness.anthropic import text, thinking, tool_use
from tests.harness.responses import function_call, function_call_output, reasoning
from tests.harness.servers import (
    Recorded,
    completion,
    is_responses_create,
    is_summary_call,
    snapshot_answer,
    stream_chunks,
)

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

PER_FORMAT = 4200  # bodies sent per format
SEED = 20
# the values every field is replaced by: each JSON type, and containers holding the wrong types
VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    10**20,
    "s",
    "",
    [],
    [1],
    ["s"],
    [None],
    [[1]],
    {},
    {"x": [1]},
    {"type": [1]},
    {"type": "text", "text": [1]},
    [{"type": [1]}],
    [{"type": "text", "text": {}}],
    [{"type": "tool_result", "content": [{"type": [1]}]}],
]
# fields some module of the proxy reads (`.get(` over the formats, the core, the token counter,
# the reload tools, the summary requests): added where a base body lacks them
READ_KEYS = (
    "type",
    "role",
    "content",
    "text",
    "name",
    "id",
    "call_id",
    "tool_call_id",
    "tool_use_id",
    "tool_calls",
    "function",
    "custom",
    "arguments",
    "input",
    "output",
    "summary",
    "source",
    "namespace",
    "server_label",
    "approval_request_id",
    "encrypted_content",
    "action",
    "error",
    "execution",
    "thinking",
    "title",
    "is_error",
    "cache_control",
    "refusal",
    "filename",
    "file_id",
    "file_url",
    "tools",
    "data",
    "status",
)
BODY_KEYS = (
    "model",
    "messages",
    "input",
    "tools",
    "functions",
    "tool_choice",
    "function_call",
    "stream",
    "store",
    "background",
    "include",
    "conversation",
    "previous_response_id",
    "instructions",
    "system",
    "thinking",
    "output_config",
    "text",
    "max_tokens",
    "metadata",
    "stream_options",
    "reasoning",
    "user",
)
NOT_READ = ("parameters", "input_schema", "encrypted_content", "signature")  # opaque to the proxy: not descended into

OFFLOAD = {"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Max-Tool-Message-Tokens": "300"}
INLINE = {
    "X-Offload-Mode": "compress",
    "X-Offload-Max-Total-Tokens": "1500",
    "X-Offload-Hard-Max-Tokens": "1",
    "X-Offload-Precompress-Ratio": "0",
}
BACKGROUND = {**INLINE, "X-Offload-Hard-Max-Tokens": "100000"}
LOG = "\n".join(f"2024-05-01T12:{i // 60:02d}:{i % 60:02d}Z INFO worker-{i % 7} GET /x/{i} 200" for i in range(60))


def output(step: int) -> str:
    return "\n".join(f"step{step} line {i}: value={i * 7} path=/src/mod{step}/file{i}.py status=ok" for i in range(40))


def chat_bases() -> list[tuple[str, dict]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "read_logs", "arguments": '{"path": "/x"}'}}
    custom = {"id": "call_2", "type": "custom", "custom": {"name": "patch", "input": "*** Begin Patch"}}
    tools = [
        {"type": "function", "function": {"name": "read_logs", "parameters": {"type": "object"}}},
        {"type": "custom", "custom": {"name": "patch"}},
    ]
    offload = {
        "model": "gpt-4o",
        "tools": tools,
        "stream": False,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Why did it fail?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {"role": "assistant", "content": "Reading.", "tool_calls": [call, custom]},
            {"role": "tool", "tool_call_id": "call_1", "content": LOG},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": LOG + "\npatched"}]},
            {"role": "user", "content": "Summarise.", "name": "dev"},
        ],
    }
    history: list[dict] = [{"role": "user", "content": "Fix the build."}]
    for i in range(5):
        history += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f'{{"i": {i}}}'}}
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": output(i)},
        ]
    history.append({"role": "user", "content": "Where are we?"})
    long = {"model": "gpt-4o", "messages": history, "tools": tools[:1]}
    return [("offload", offload), ("long", long)]


def responses_bases() -> list[tuple[str, dict]]:
    tools = [
        {"type": "function", "name": "read_logs", "parameters": {"type": "object"}},
        {"type": "namespace", "name": "fs", "tools": [{"type": "function", "name": "read"}]},
        {"type": "custom", "name": "patch"},
        {"type": "web_search"},
    ]
    items = [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Why did it fail?"},
                {"type": "input_image", "image_url": "data:,"},
                {"type": "input_file", "filename": "a.txt", "file_id": "f"},
            ],
        },
        reasoning("Looking at logs", id="rs_1"),
        function_call("read_logs", {"path": "/x"}, call_id="call_1", id="fc_1"),
        function_call_output("call_1", LOG),
        {"type": "custom_tool_call", "call_id": "call_2", "name": "patch", "input": "*** Begin Patch", "id": "ctc_2"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": LOG + "!"}]},
        {"type": "computer_call", "call_id": "call_3", "action": {"type": "screenshot"}, "id": "cu_3"},
        {
            "type": "computer_call_output",
            "call_id": "call_3",
            "output": {"type": "computer_screenshot", "image_url": "data:,"},
        },
        {"type": "local_shell_call", "call_id": "call_4", "action": {"type": "exec", "command": ["ls"]}, "id": "ls_4"},
        {"type": "local_shell_call_output", "call_id": "call_4", "output": "a\nb"},
        {"type": "mcp_call", "server_label": "git", "name": "log", "arguments": "{}", "output": "ok", "id": "mcp_5"},
        {"type": "item_reference", "id": "msg_0"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done."}, {"type": "refusal", "refusal": "no"}],
        },
        {"role": "user", "content": "Summarise."},
    ]
    offload = {
        "model": "gpt-5",
        "instructions": "Help.",
        "input": items,
        "tools": tools,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "text": {"verbosity": "low"},
        "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "read_logs"}]},
    }
    history: list[dict] = [{"role": "user", "content": "Fix the build."}]
    for i in range(5):
        history += [
            function_call("bash", {"i": i}, call_id=f"c{i}", id=f"fc{i}"),
            function_call_output(f"c{i}", output(i)),
        ]
    history.append({"role": "user", "content": "Where are we?"})
    long = {
        "model": "gpt-5",
        "input": history,
        "tools": tools[:1],
        "tool_choice": "auto",
        "previous_response_id": "resp_fuzz",
        "conversation": None,
    }
    return [("offload", offload), ("long", long)]


def messages_bases() -> list[tuple[str, dict]]:
    tools = [
        {"name": "bash", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    document = {"type": "document", "source": {"type": "content", "content": [text("a page")]}, "title": "Doc"}
    odd = [
        {"role": "system", "content": "Environment: linux"},
        {
            "role": "user",
            "content": [text("hi"), {"type": "image", "source": {"type": "base64", "data": "AAAA"}}, document],
        },
        {
            "role": "assistant",
            "content": [
                thinking("Plan."),
                tool_use("bash", {"cmd": "cat log"}, id="toolu_a"),
                tool_use("bash", {"cmd": "ls"}, id="toolu_b"),
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_a",
                    "content": LOG,
                    "cache_control": {"type": "ephemeral"},
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [text(LOG + "B"), text("tail")],
                    "is_error": False,
                },
                text("<system-reminder>after</system-reminder>"),
            ],
        },
        {
            "role": "assistant",
            "content": [
                text("ok"),
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "x"}},
            ],
        },
        {"role": "user", "content": "Summarise."},
    ]
    offload = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 2048,
        "messages": odd,
        "tools": tools,
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    long = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 2048,
        "messages": conversation(5),
        "tools": tools[:1],
        "system": "Be brief.",
        "tool_choice": {"type": "any"},
        "output_config": {"effort": "low"},
    }
    return [("offload", offload), ("long", long)]


FORMATS = {
    "chat": ("/v1/chat/completions", chat_bases),
    "responses": ("/v1/responses", responses_bases),
    "messages": ("/v1/messages", messages_bases),
}

Path = tuple[Any, ...]


HISTORY = ("messages", "input")
# how each base body is sent, in turn: headers, stream
MODES = {
    "offload": [(OFFLOAD, False), (OFFLOAD, True), (OFFLOAD, False)],
    "long": [
        (INLINE, False),
        (BACKGROUND, True),
        (BACKGROUND, False),
        (INLINE, False),
        (INLINE, True),
        (BACKGROUND, False),
    ],
}


def field_paths(value: Any, path: Path = ()) -> Iterator[Path]:
    """Every key and element of `value` (its own path first), and every READ_KEYS field its
    objects lack; of a long history, its first items, one in the middle and its last ones."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            if key not in NOT_READ:
                yield from field_paths(inner, (*path, key))
        for key in READ_KEYS if path else BODY_KEYS:
            if key not in value:
                yield (*path, key)
    elif isinstance(value, list):
        n = len(value)
        for i, inner in enumerate(value):
            if len(path) != 1 or path[0] not in HISTORY or i < 4 or i >= n - 3 or i == n // 2:
                yield from field_paths(inner, (*path, i))


def replaced(body: dict, path: Path, value: Any) -> dict:
    out = orjson.loads(orjson.dumps(body))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def cases(bases: list[tuple[str, dict]]) -> list[tuple[str, Path, Any]]:
    """(base, path, value), PER_FORMAT of them, seeded: every path with values of three kinds
    in turn (VALUES[k], [k + 7], [k + 14]: a scalar, an array, an object, roughly), as many
    as fit, the rest drawn at random."""
    paths = [(name, path) for name, body in bases for path in dict.fromkeys(field_paths(body))]
    each = max(1, min(3, PER_FORMAT // len(paths)))
    chosen = {(name, path, (k + 7 * j) % len(VALUES)) for k, (name, path) in enumerate(paths) for j in range(each)}
    rng = random.Random(SEED)
    rest = sorted(
        {(name, path, k) for name, path in paths for k in range(len(VALUES))} - chosen,
        key=lambda c: (c[0], repr(c[1]), c[2]),
    )
    chosen |= set(rng.sample(rest, max(0, PER_FORMAT - len(chosen))))
    picked = sorted(chosen, key=lambda c: (c[0], repr(c[1]), c[2]))
    rng.shuffle(picked)
    return [(name, path, VALUES[k]) for name, path, k in picked]


class Records(logging.Handler):
    """The log records at ERROR and above, and any carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.bad: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.bad.append(record)


UPSTREAM = "http://fuzz-upstream.test"


def upstream_answer(request: httpx2.Request) -> httpx2.Response:
    """The fake upstream, in process (respx: no socket, no thread): a short answer in the shape
    asked for (SSE when streamed), a snapshot to the proxy's summary calls."""
    rec = Recorded(request.method, request.url.path, "", {}, request.content)
    body = rec.json() if request.method == "POST" and request.content else {}
    stream = isinstance(body, dict) and body.get("stream") is True
    if is_summary_call(rec):
        summary = snapshot_answer(rec)
        return httpx2.Response(summary.status_code, content=summary.body, headers={"content-type": "application/json"})
    if rec.path.endswith("/chat/completions"):
        events, answer = stream_chunks("ok"), completion("ok")
    elif is_responses_create(rec):
        answer = fake_responses.response(fake_responses.message("ok"), request=body, usage=fake_responses.usage())
        events = fake_responses.sse_stream(answer)
    elif fake_anthropic.is_messages_create(rec):
        answer = fake_anthropic.message(fake_anthropic.text("ok"))
        events = fake_anthropic.events(answer)
    elif rec.path.endswith("/count_tokens"):
        return httpx2.Response(200, json={"input_tokens": max(1, len(request.content) // 4)})
    else:  # e.g. the proxy checking a key on /models
        return httpx2.Response(200, json={"object": "list", "data": []})
    if stream:
        return httpx2.Response(200, content=b"".join(events), headers={"content-type": "text/event-stream"})
    return httpx2.Response(200, json=answer)


@pytest.fixture(scope="module")
def fuzz_proxy(make_proxy, redis_url):
    with respx.mock(assert_all_called=False) as mock:
        mock.route(host="fuzz-upstream.test").mock(side_effect=upstream_answer)
        mock.route(host="127.0.0.1").pass_through()  # the client to the proxy
        with make_proxy(upstream=f"{UPSTREAM}/v1", anthropic_upstream=UPSTREAM) as url:
            yield url, mock


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_type_fuzz(fuzz_proxy, fmt):
    url, mock = fuzz_proxy
    path, make_bases = FORMATS[fmt]
    bases = make_bases()
    by_name = dict(bases)
    records = Records()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]  # uvicorn's does not propagate to the root
    for logger in loggers:
        logger.addHandler(records)
    statuses: collections.Counter = collections.Counter()
    fives: list[str] = []
    started, cpu = time.monotonic(), time.process_time()
    credential = (
        {"x-api-key": "sk-ant-fuzz-types", "anthropic-version": "2023-06-01"}
        if fmt == "messages"
        else {"authorization": "Bearer sk-fuzz-types"}
    )
    try:
        with httpx2.Client(
            base_url=url, timeout=60, headers={**credential, "content-type": "application/json"}
        ) as client:
            for n, (name, field, value) in enumerate(cases(bases)):
                headers, stream = MODES[name][n % len(MODES[name])]
                body = replaced({**by_name[name], "stream": stream}, field, value)
                target = "/v1/messages/count_tokens" if fmt == "messages" and n % 3 == 2 else path
                case = f"{target} {name} stream={stream} {field} = {value!r}"
                try:
                    r = client.post(target, content=json.dumps(body).encode(), headers=headers)
                    r.read()
                except httpx2.TransportError as exc:  # the connection dropped: the proxy failed mid-answer
                    statuses["dropped"] += 1
                    fives.append(f"{case}: {type(exc).__name__}")
                    continue
                statuses[r.status_code] += 1
                if r.status_code >= 500:
                    fives.append(f"{case}: {r.status_code} {r.text[:200]}")
                if len(mock.calls) > 500:
                    mock.calls.clear()
    finally:
        for logger in loggers:
            logger.removeHandler(records)
    total = sum(statuses.values())
    tracebacks = [r for r in records.bad if r.exc_info]
    print(
        f"\n[type fuzz] {fmt}: {total} requests in {time.monotonic() - started:.1f} s "
        f"({time.process_time() - cpu:.1f} s CPU); statuses "
        f"{dict(sorted(statuses.items(), key=str))}; 5xx or dropped {len(fives)}; tracebacks {len(tracebacks)}; "
        f"ERROR records {len(records.bad)}"
    )
    assert total >= 4000
    assert not fives, "\n".join(fives[:20])
    assert not records.bad, "\n".join(f"{r.name}: {r.getMessage()}" for r in records.bad[:10])
