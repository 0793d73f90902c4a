"""Small synthetic agent histories for tests."""

from __future__ import annotations

import json
import random
import re

REF = re.compile(r"ref=([A-Za-z0-9_-]+)")


def big_text(label: str, lines: int = 400) -> str:
    return "\n".join(f"{label} line {i}: value={i * 7} path=/src/{label}/mod{i}.py status=ok" for i in range(lines))


def big_text_over(tokens: int, counter, label: str = "out") -> str:
    """`big_text` with the fewest lines `counter` counts as more than `tokens`: the same size in
    tokens whether tiktoken's encodings are there or the proxy estimates without them."""
    lines = 1
    while counter.text(big_text(label, lines)) <= tokens:
        lines *= 2
    low, high = lines // 2, lines  # low is at most `tokens` (or 0), high over it
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if counter.text(big_text(label, middle)) <= tokens else (low, middle)
    return big_text(label, high)


def agent_history(steps: int = 6, lines: int = 300, system: str = "You are a coding agent.") -> list[dict]:
    """system, user, then `steps` × (assistant tool call, tool result)."""
    messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": "Fix the bug."}]
    for i in range(steps):
        call_id = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{i}"})},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": big_text(f"step{i}", lines)})
    return messages


def drawn_results(count: int = 25, *, lines: int = 1_950, distinct: int = 120, seed: int = 0) -> list[str]:
    """`count` tool results of `lines` lines, each line drawn at random from `distinct` short
    ones (issue 38's folding stall: alike in size and lines, so every pair passes the share
    check, yet no diff between two of them is short; 1,950 lines: about 5,800 tokens each, so
    each stays a fold base under the default tool-result threshold)."""
    rnd = random.Random(seed)
    pool = [f"x{k:03d}" for k in range(distinct)]
    return ["\n".join(rnd.choice(pool) for _ in range(lines)) for _ in range(count)]


def tool_history(results: list[str]) -> list[dict]:
    """A chat history of one tool call and result per text of `results`, then a user turn."""
    messages: list[dict] = [{"role": "user", "content": "Run the checks."}]
    for i, text in enumerate(results):
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": text},
        ]
    return [*messages, {"role": "user", "content": "Go on."}]


def refs_sent(rec) -> list[str]:
    """The references in the messages of a recorded upstream request."""
    return REF.findall(json.dumps(rec.json()["messages"]))
