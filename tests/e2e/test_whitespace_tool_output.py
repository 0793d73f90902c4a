"""A tool output of a long run of spaces (a padded log, a blank-filled file: 1 MB, well inside the
body limit) must be counted and compacted like any other, never a 500.

tiktoken's BPE regex overflows its stack on a whitespace run of about a million characters and
raises pyo3's PanicException, a BaseException (not Exception): no `except Exception` catches it."""

from __future__ import annotations

import httpx2
from starlette.responses import JSONResponse

from tests.harness.servers import completion


async def handler(request, rec):
    return JSONResponse(completion("ok"))


def test_a_megabyte_of_spaces_in_a_tool_output_is_not_a_500(make_proxy, upstream):
    upstream.handler = handler
    messages = [
        {"role": "user", "content": "print the file"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "cat f"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "start" + " " * 1_000_000 + "end"},
        {"role": "user", "content": "what is in it?"},
    ]
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/chat/completions",
            timeout=60,
            headers={"authorization": "Bearer sk-spaces"},
            json={"model": "gpt-4o", "messages": messages},
        )
        assert r.status_code == 200, r.text[:300]
