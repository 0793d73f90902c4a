"""`offload-proxy wrap` as a user runs it, for the tests: its command line, an environment in which
the wrapper (and the proxy it starts) import this checkout's `proxy`, stand-in agents, the exit line
parsed, and the proxies still alive that were started with a given admin token (the proxy child
gets it as OFFLOAD_ADMIN_TOKEN, so /proc/<pid>/environ tells it from any other process)."""

from __future__ import annotations

import os
import re
import secrets
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(
    r"^offload-proxy: (?:no requests went through the proxy|(?P<requests>[\d,]+) requests?, "
    r"(?P<before>[\d,]+) → (?P<after>[\d,]+) tokens(?: \((?P<ratio>[\d.]+)\))?"
    r"(?:, billed \$(?P<billed>[\d.,]+) \(uncached \$(?P<uncached>[\d.,]+), reads \$(?P<reads>[\d.,]+), "
    r"writes \$(?P<writes>[\d.,]+), output \$(?P<output>[\d.,]+)\))?"
    r"(?:, ×(?P<cost>[\d.]+) of the raw history's \(est\.\))?, (?P<reloads>[\d,]+) reloads?"
    r"(?:, (?P<missing>[\d,]+) turns? without usage)?)"
    r"(?:; proxy still up at (?P<url>\S+): dashboard \S+(?: \(admin token \S+\))?, "
    r"stop it with kill (?P<pid>\d+)(?:; its log and store stay in (?P<scratch>\S+) until you remove it)?)?$",
    re.M,
)


def argv(agent: str, *options: str) -> list[str]:
    """`python -m proxy wrap AGENT OPTIONS…` (the caller appends `--` and the agent's arguments)."""
    return [sys.executable, "-m", "proxy", "wrap", agent, *options]


def token() -> str:
    return "wrap-test-" + secrets.token_hex(8)


def environment(*path: Path | str, base: dict[str, str] | None = None) -> dict[str, str]:
    """This environment (or `base`), with `path` first on PATH and this checkout's proxy importable."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([*map(str, path), env.get("PATH", "/usr/bin:/bin")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def parse(stderr: str) -> dict[str, str]:
    """The exit line's numbers (strings, commas removed); AssertionError when there is none."""
    found = LINE.search(stderr)
    assert found, f"no exit line in:\n{stderr[-3000:]}"
    return {name: value.replace(",", "") for name, value in found.groupdict().items() if value is not None}


def standin(folder: Path, name: str, body: str) -> Path:
    """An executable `name` in `folder`: a Python script whose body is `body` (dedented); it is
    given `report(**fields)`, which appends one JSON line to $STANDIN_REPORT."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(
        f"#!{sys.executable}\nimport json, os, signal, sys, time\n"
        "def report(**fields):\n"
        "    with open(os.environ['STANDIN_REPORT'], 'a') as out:\n"
        "        out.write(json.dumps(fields) + '\\n')\n" + textwrap.dedent(body)
    )
    script.chmod(0o755)
    return script


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (this container's init may never reap one)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def proxies_with(admin_token: str) -> list[int]:
    """The live processes started with OFFLOAD_ADMIN_TOKEN=`admin_token`."""
    wanted = f"OFFLOAD_ADMIN_TOKEN={admin_token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                held = wanted in (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if held and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def roots(pids: list[int]) -> list[int]:
    """Those of `pids` whose parent is not among them: the proxy, not the worker processes it starts."""
    return [pid for pid in pids if parent_of(pid) not in pids]


def wait_gone(pids: list[int], within: float = 30) -> list[int]:
    """Those of `pids` still alive after `within` seconds (a liveness bound, not a speed target)."""
    deadline = time.monotonic() + within
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left
