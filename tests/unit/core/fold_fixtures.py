"""Tool results as seven agents write them, for the folding tests: the four frameworks of
../shared/traces (mini-swe-agent, openhands-sdk, tau-bench, swe-agent) and aider, Claude Code and
Codex. Small, made up, in each one's shape; each case is a first result and a re-run of it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from proxy.formats.messages import history as messages_history


def _pytest(failing: tuple[str, ...], *, seconds: str = "0.42") -> str:
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0",
        "rootdir: /testbed",
        "collected 80 items",
        "",
    ]
    for k in range(80):
        name = f"tests/test_rounding.py::test_case_{k}"
        lines.append(f"{name} {'FAILED' if f'test_case_{k}' in failing else 'PASSED'}")
    lines += ["", "=================================== FAILURES ==================================="]
    for name in failing:
        lines += [
            f"____________________________ {name} ____________________________",
            f"    def {name}():",
            ">       assert round_half(2.5) == 3",
            "E       assert 2 == 3",
            "tests/test_rounding.py:41: AssertionError",
        ]
    passed = 80 - len(failing)
    lines.append(
        f"========================= {len(failing)} failed, {passed} passed in {seconds}s ========================="
    )
    return "\n".join(lines)


def _source(version: str) -> list[str]:
    return [
        "import math",
        "",
        "",
        "def round_half(x: float) -> int:",
        '    """Round half away from zero."""',
        f"    return {version}",
        "",
        "",
        *[f"def helper_{k}(value):\n    return value * {k} + math.floor(value / {k + 1})" for k in range(40)],
    ]


def cat_n(lines: list[str], arrow: str = "\t") -> str:
    numbered: list[str] = []
    for line in "\n".join(lines).split("\n"):
        numbered.append(f"{len(numbered) + 1:6}{arrow}{line}")
    return "\n".join(numbered)


MSA_FIRST = "<returncode>1</returncode>\n<output>\n" + _pytest(("test_case_3", "test_case_7")) + "\n</output>"
MSA_RERUN = "<returncode>1</returncode>\n<output>\n" + _pytest(("test_case_7",), seconds="0.40") + "\n</output>"
OH_VIEW = (
    "Here's the result of running `cat -n` on /workspace/app/rounding.py:\n"
    + cat_n(_source("math.floor(x + 0.5)"))
    + "\n"
)
OH_AFTER_EDIT = (
    "Here's the result of running `cat -n` on /workspace/app/rounding.py:\n"
    + cat_n(_source("int(math.copysign(math.floor(abs(x) + 0.5), x))"))
    + "\n"
)
TAU_RESERVATION = json.dumps(
    {
        "reservation_id": "JG7FMM",
        "user_id": "omar_davis_3817",
        "origin": "MCO",
        "destination": "CLT",
        "flight_type": "one_way",
        "cabin": "business",
        "flights": [
            {"origin": "MCO", "destination": "BOS", "flight_number": "HAT028", "date": "2024-05-21", "price": 1859},
            {"origin": "BOS", "destination": "CLT", "flight_number": "HAT277", "date": "2024-05-21", "price": 1679},
        ],
        "passengers": [
            {"first_name": "Omar", "last_name": "Davis", "dob": "1982-10-19"},
            {"first_name": "Fatima", "last_name": "Patel", "dob": "1970-09-26"},
        ],
        "payment_history": [{"payment_id": "credit_card_2929732", "amount": 7076}],
        "created_at": "2024-05-12T04:48:49",
        "total_baggages": 2,
        "nonfree_baggages": 0,
        "insurance": "yes",
    }
)
TAU_OTHER = (
    TAU_RESERVATION.replace("JG7FMM", "LQ940Q")
    .replace("1859", "133")
    .replace("1679", "166")
    .replace("MCO", "SFO")
    .replace("HAT028", "HAT294")
    .replace("business", "economy")
    .replace("2929732", "1119292")
)
SWEA_TRACE = (
    'Traceback (most recent call last):\r\n  File "/testbed/reproduce.py", line 4, in <module>\r\n'
    + "".join(
        f'  File "/testbed/src/marshmallow/fields.py", line {1100 + k}, in _serialize\r\n'
        f"    return self._format(value, depth={k})\r\n"
        for k in range(30)
    )
    + "AttributeError: 'NoneType' object has no attribute 'isoformat'\r\n"
    "(Open file: /testbed/reproduce.py)\n(Current directory: /testbed)\nbash-$"
)
SWEA_TRACE_AGAIN = SWEA_TRACE.replace("line 1104,", "line 1106,").replace("'isoformat'", "'timestamp'")
CODEX_FIRST = (
    "Chunk ID: 4f2a9c\nWall time: 1.8412 seconds\nProcess exited with code 1\n"
    "Original token count: 612\nOutput:\n" + _pytest(("test_case_3", "test_case_7"))
)
CODEX_AGAIN = (
    "Chunk ID: 7b1d03\nWall time: 1.7920 seconds\nProcess exited with code 1\n"
    "Original token count: 598\nOutput:\n" + _pytest(("test_case_7",), seconds="0.39")
)
CLAUDE_READ = cat_n(_source("math.floor(x + 0.5)"), arrow="→")
CLAUDE_BASH = _pytest(("test_case_3",))
CLAUDE_BASH_OTHER = "\n".join(f"src/app/module_{k}.py: {k * 13} lines, {k * 3} functions" for k in range(40))
AIDER_RUN = "I ran this command:\n\npytest tests/test_rounding.py\n\nAnd got this output:\n\n" + _pytest(
    ("test_case_3",)
)


@dataclass(frozen=True)
class Case:
    name: str
    agent: str  # whose shape: chat (mini-swe-agent, openhands-sdk, tau-bench, swe-agent), codex, claude, aider
    first: str
    second: str
    expect: str | None  # "identical", "diff", or None (the second goes as it is)
    tool: str = "bash"


CASES = [
    Case("mini-swe-agent: a failing test run again", "chat", MSA_FIRST, MSA_FIRST, "identical"),
    Case("mini-swe-agent: a re-run, one test fixed", "chat", MSA_FIRST, MSA_RERUN, "diff"),
    Case("openhands-sdk: the same file viewed again", "chat", OH_VIEW, OH_VIEW, "identical", "str_replace_editor"),
    Case(
        "openhands-sdk: a file viewed again after an edit", "chat", OH_VIEW, OH_AFTER_EDIT, "diff", "str_replace_editor"
    ),
    Case(
        "tau-bench: the same reservation looked up twice",
        "chat",
        TAU_RESERVATION,
        TAU_RESERVATION,
        "identical",
        "get_reservation_details",
    ),
    Case(
        "tau-bench: another reservation (one JSON line)",
        "chat",
        TAU_RESERVATION,
        TAU_OTHER,
        None,
        "get_reservation_details",
    ),
    Case("swe-agent: a traceback with two lines changed", "chat", SWEA_TRACE, SWEA_TRACE_AGAIN, "diff"),
    Case(
        "codex: exec_command re-run, timing and one test changed",
        "codex",
        CODEX_FIRST,
        CODEX_AGAIN,
        "diff",
        "exec_command",
    ),
    Case("codex: a different command's output", "codex", CODEX_FIRST, CLAUDE_BASH_OTHER, None, "exec_command"),
    Case("claude code: Read of the same file again", "claude", CLAUDE_READ, CLAUDE_READ, "identical", "Read"),
    Case("claude code: Bash run again", "claude", CLAUDE_BASH, CLAUDE_BASH, "identical", "Bash"),
    Case("claude code: a different Bash output", "claude", CLAUDE_BASH, CLAUDE_BASH_OTHER, None, "Bash"),
    Case("aider: test output in user messages (no tool results)", "aider", AIDER_RUN, AIDER_RUN, None),
]


def history(agent: str, results: list[str], *, tool: str = "bash", filler: int = 1) -> list[Any]:
    """A history of the agent's shape: its task, then one tool call and result per text of
    `results` (with `filler` short steps between), as that agent's format carries them."""
    steps: list[tuple[str, str]] = []
    for k, text in enumerate(results):
        steps += [(f"ls -la /tmp/step{k}_{f}", f"total {k + f}\nok") for f in range(filler if k else 0)]
        steps.append(("run", text))
    if agent == "aider":  # no tools: the assistant's edits and the user's pasted outputs
        items: list[Any] = [
            {"role": "system", "content": "Act as an expert software developer."},
            {"role": "user", "content": "Fix round_half."},
        ]
        for k, (_, text) in enumerate(steps):
            items += [
                {"role": "assistant", "content": f"Applied edit to rounding.py ({k})"},
                {"role": "user", "content": text},
            ]
        return items
    if agent == "codex":
        items = [{"role": "developer", "content": "You are Codex."}, {"role": "user", "content": "Fix round_half."}]
        for k, (command, text) in enumerate(steps):
            items += [
                {
                    "type": "function_call",
                    "call_id": f"call_{k}",
                    "name": tool,
                    "arguments": json.dumps({"cmd": command}),
                },
                {"type": "function_call_output", "call_id": f"call_{k}", "output": text},
            ]
        return items
    if agent == "claude":
        messages: list[Any] = [{"role": "user", "content": "Fix round_half."}]
        for k, (command, text) in enumerate(steps):
            messages += [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": f"toolu_{k:02}", "name": tool, "input": {"command": command}}
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k:02}", "content": text}]},
            ]
        return messages_history({"messages": messages})
    items = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Fix it."}]
    for k, (command, text) in enumerate(steps):
        items += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{k}",
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps({"command": command})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{k}", "content": text},
        ]
    return items
