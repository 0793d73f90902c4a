"""Requests that continue from a compaction item, and how a refused token is answered."""

from __future__ import annotations

import httpx2

# A history worth compacting: a task, and a build whose 800-line output the proxy offloads.
BUILD_OUTPUT = "\n".join(f"line {i}: step {i} ok" for i in range(800))
BUILD_HISTORY = [
    {"type": "message", "role": "user", "content": "Task: build."},
    {"type": "function_call", "call_id": "c1", "name": "build", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": BUILD_OUTPUT},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "built"}]},
]


def continued(token: str, *, model: str = "gpt-5") -> dict:
    """A Responses request sent from a compaction item carrying `token` on."""
    return {
        "model": model,
        "store": False,
        "input": [
            {"type": "compaction", "id": "cmp_x", "encrypted_content": token},
            {"type": "message", "role": "user", "content": "next"},
        ],
    }


def assert_refused(r: httpx2.Response, why: str, *, param: str | None = None) -> None:
    """A 400 `invalid_compaction` in OpenAI's shape whose message says `why` (naming `param`)."""
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_compaction", r.text
    assert param is None or error["param"] == param, r.text
    assert why in error["message"], r.text
