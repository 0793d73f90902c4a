"""Long streamed answers through the reload path vs relayed: the cost of rewriting every event.

    .venv/bin/python bench/reload_stream.py [--repeats 3]

A request whose history gets offloaded is answered with reload tools injected: its stream is
parsed event by event and rewritten (`proxy.reload.loop.stream`). The same request with
`X-Offload-Reload-Tools: off` is relayed as bytes. Two answers, both from the fake upstream:
a chat completion of 512 KB in 4-character deltas (131,072 chunks) and a Messages answer of
80,000 text deltas. Prints the client's wall time and the proxy's CPU time (all threads) per
answer, medians over `repeats`, and the reload/relayed ratio. Accumulating the answer by
repeated `str +=` made the reload path quadratic (1.7 s of loop time for the 512 KB answer).
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx2
from common import cpu_seconds, machine, servers

TOOL_OUTPUT = "\n".join(f"2024-05-01 worker-{i % 7} GET /items/{i} 200 {i * 37 % 1000} ms" for i in range(600))
OFFLOAD = {"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Max-Tool-Message-Tokens": "500"}

CHAT = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Why is it slow?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "logs", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": TOOL_OUTPUT},
        {"role": "user", "content": "Write it all up."},
    ],
}
MESSAGES = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "stream": True,
    "tools": [{"name": "logs", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "Why is it slow?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "logs", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": TOOL_OUTPUT}]},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Write it all up."},
    ],
}

CASES = [  # name, path, body, credentials, deltas, characters per delta
    ("chat 512 KB in 4-char deltas", "chat/completions", CHAT, {"authorization": "Bearer sk-bench"}, 131_072, 4),
    (
        "messages 80K deltas",
        "messages",
        MESSAGES,
        {"x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01"},
        80_000,
        4,
    ),
]


def one(url: str, pid: int, body: dict, headers: dict) -> tuple[float, float, int]:
    """(wall seconds, proxy CPU seconds, bytes) of one streamed answer."""
    cpu, started = cpu_seconds(pid), time.perf_counter()
    with httpx2.stream("POST", url, json=body, headers=headers, timeout=600) as r:
        size = sum(len(part) for part in r.iter_bytes())
        assert r.status_code == 200, r.status_code
        assert int(r.headers.get("x-offload-refs") or 0) > 0, "nothing offloaded: no reload tools to inject"
    return time.perf_counter() - started, cpu_seconds(pid) - cpu, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    with servers() as (_, proxied, proxy):
        base = proxied.removesuffix("/v1")
        for name, path, body, credentials, deltas, chars in CASES:
            results = {}
            for mode, reload in (("reload", "on"), ("relayed", "off")):
                headers = {
                    **credentials,
                    **OFFLOAD,
                    "X-Offload-Reload-Tools": reload,
                    "x-bench-deltas": str(deltas),
                    "x-bench-delta-chars": str(chars),
                }
                runs = [one(f"{base}/v1/{path}", proxy.pid, body, headers) for _ in range(args.repeats)]
                results[mode] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
            (rw, rc), (pw, pc) = results["reload"], results["relayed"]
            print(
                f"{name}: reload {rw:.2f} s wall, {rc:.2f} s proxy CPU | relayed {pw:.2f} s wall, "
                f"{pc:.2f} s proxy CPU | ratio wall {rw / pw:.2f}, CPU {rc / pc:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
