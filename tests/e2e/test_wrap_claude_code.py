"""The real Claude Code through `offload-proxy wrap claude`, against the bundled fake upstream.

The first test is test_claude_code's scripted run (two Bash calls, the first output offloaded, the
fake model's `context_reload` run by the proxy) with the wrapper in front: no `--anthropic-upstream`
given, the proxy's upstream is where the user's `ANTHROPIC_BASE_URL` pointed (the fake), and
Claude Code is sent to the proxy in its place. The offload thresholds come from Claude Code's own
`ANTHROPIC_CUSTOM_HEADERS`, which the wrapper passes through untouched.

The second runs the wrapper in a pseudo-terminal (the `pty` module), as a user's shell would: while
Claude Code waits for the model's answer, the terminal's Ctrl-C (the byte 0x03, which the line
discipline turns into SIGINT for the foreground process group) interrupts Claude Code, never the
proxy (in a session of its own) nor the wrapper; the wrapper passes Claude Code's status on and
leaves no proxy behind.
"""

from __future__ import annotations

import asyncio
import os
import pty
import shutil
import threading

import pytest

from tests.e2e.test_claude_code import (
    CAT_BIG,
    CAT_NOTES,
    FINAL,
    HEADERS,
    PROMPT,
    by_id,
    claude,
    model_handler,
    reload_model,
)
from tests.harness import wrap
from tests.harness.claude_code import install, is_main_request, result_text
from tests.harness.codex import Trap
from tests.harness.prerequisites import require


@pytest.fixture(scope="session")
def claude_binary():
    require(
        shutil.which("npm") is not None,
        "npm",
        "not on PATH: Claude Code (npm @anthropic-ai/claude-code) cannot be installed",
    )
    return install()


def wrapped(claude_binary, upstream, tmp_path, *options: str, headers=HEADERS):
    cc = claude(claude_binary, upstream.url, tmp_path, headers)  # ANTHROPIC_BASE_URL: the fake, as a user's gateway
    env = wrap.environment(claude_binary.parent, base={})
    cc.prefix = [*wrap.argv("claude", *options), "--"]
    cc.env = {"PATH": env["PATH"], "PYTHONPATH": env["PYTHONPATH"], "TMPDIR": str(tmp_path)}
    return cc


def test_claude_code_through_wrap(claude_binary, upstream, tmp_path):
    upstream.handler = model_handler(reload_model)
    token = wrap.token()
    cc = wrapped(claude_binary, upstream, tmp_path, "--admin-token", token)
    run = cc.run(PROMPT)

    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert run.trapped == []
    assert run.text == FINAL and run.result["is_error"] is False
    assert {b["tool_use_id"] for b in run.tool_results()} == {CAT_BIG, CAT_NOTES}
    assert "context_reload" not in run.stdout
    # the upstream (reached through the proxy: the fake was Claude Code's ANTHROPIC_BASE_URL)
    first, second, third, fourth = (r.json() for r in upstream.messages_requests())
    assert result_text(by_id(third)[CAT_BIG]).startswith("[offloaded tool result: ")
    assert [b["name"] for m in fourth["messages"][-2:-1] for b in m["content"]] == ["context_reload"]
    assert not any(k.startswith("x-offload-") for r in upstream.requests for k in r.headers)
    # the exit line: three turns of Claude Code's, one reload round the proxy ran; the proxy stopped
    line = wrap.parse(run.stderr)
    assert (line["requests"], line["reloads"]) == ("3", "1")
    assert int(line["after"]) < int(line["before"])
    assert "pid" not in line
    assert wrap.proxies_with(token) == []


def test_ctrl_c_in_a_terminal_reaches_claude_code(claude_binary, upstream, tmp_path):
    asked, release = threading.Event(), threading.Event()

    async def stall(request, rec):  # the model never answers: Claude Code waits until interrupted
        if rec.method == "POST" and rec.path.endswith("/v1/messages") and is_main_request(rec.json()):
            asked.set()
            await asyncio.to_thread(release.wait, 60)
        return await model_handler(reload_model)(request, rec)

    upstream.handler = stall
    token = wrap.token()
    cc = wrapped(claude_binary, upstream, tmp_path, "--admin-token", token)
    argv = cc.argv([], PROMPT)
    try:
        with Trap() as trap:
            env = cc.environment(trap.url)
            pid, terminal = pty.fork()
            if pid == 0:  # the child: a session whose controlling terminal is the pty, as a shell's
                os.chdir(cc.workdir)
                os.execve(argv[0], argv, env)
            output = bytearray()
            reader = threading.Thread(target=_drain, args=(terminal, output), daemon=True)
            reader.start()
            assert asked.wait(120), (
                bytes(output).decode(errors="replace")[-3000:],
                [r.path for r in upstream.requests],
            )
            proxies = wrap.proxies_with(token)
            assert len(wrap.roots(proxies)) == 1
            os.write(terminal, b"\x03")  # Ctrl-C, as typed
            _, status = os.waitpid(pid, 0)
            reader.join(10)
    finally:
        release.set()
    text = bytes(output).decode(errors="replace")
    # Claude Code was interrupted, mid-request: it says so, gives no answer, and ends its -p run with
    # status 0 (2.1.330's status for an interrupted run), which the wrapper passes on
    assert "[Request interrupted by user]" in text and FINAL not in text, text[-3000:]
    assert os.waitstatus_to_exitcode(status) == 0
    assert "offload-proxy wrap:" not in text  # no error of the wrapper's
    assert wrap.wait_gone(proxies) == []


def _drain(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every process holding the terminal has exited
            return
        if not chunk:
            return
        into.extend(chunk)
