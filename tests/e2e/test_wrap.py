"""`offload-proxy wrap` with stand-in agents: small executables on PATH named `claude`, `codex`,
`opencode`, `aider` that record what they were given (arguments, the variables that point them at
the proxy, their terminal) and may call the proxy as the real agent would. The real Claude Code
and Codex CLI run in test_wrap_claude_code.py and test_wrap_codex.py; opencode and aider are not
installed here, so the exact settings they get are checked on stand-ins.

Bad input: an unknown agent, an agent not installed, a busy port, an invalid setting, a proxy that
fails to start, an agent that exits at once, no proxy at --proxy-url: each one line and a non-zero
status, and no proxy left running. The wrapper SIGKILLed: its proxy and its agent die with it.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import socket
import struct
import subprocess
import termios
import threading
from pathlib import Path

import pytest

from tests.harness import wrap
from tests.harness.servers import ProxyProcess, default_handler

# a stand-in that records its arguments and the variables wrap sets, then exits with $STANDIN_STATUS
RECORDER = """
report(argv=sys.argv[1:], env={k: v for k, v in os.environ.items()
                               if k.endswith(("BASE_URL", "API_BASE", "CONFIG_CONTENT")) or k in ("NO_PROXY", "no_proxy")})
sys.exit(int(os.environ.get("STANDIN_STATUS", "0")))
"""
# a stand-in that sends one Anthropic Messages request through ANTHROPIC_BASE_URL, as Claude Code does
ASKS = """
import urllib.request
body = json.dumps({"model": "claude-sonnet-4", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=body.encode(),
                                 headers={"x-api-key": "sk-ant-standin", "anthropic-version": "2023-06-01",
                                          "content-type": "application/json"})
with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as answer:
    report(status=answer.status, text=json.loads(answer.read())["content"][0]["text"])
"""


def run(
    agent: str, *options: str, agent_args: tuple[str, ...] = (), env: dict[str, str], timeout: float = 120, **kwargs
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*wrap.argv(agent, *options), "--", *agent_args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


def reports(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def agents(tmp_path):
    """(a folder for stand-ins, their report file, an environment with the folder first on PATH)."""
    folder, report = tmp_path / "bin", tmp_path / "report.jsonl"
    folder.mkdir()
    env = wrap.environment(folder)
    env["STANDIN_REPORT"] = str(report)
    env["TMPDIR"] = str(tmp_path)  # the run folders wrap leaves on purpose (--keep, a failed start, SIGKILL) go here
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "OPENAI_API_BASE",
        "ANTHROPIC_API_BASE",
        "OPENCODE_CONFIG_CONTENT",
        "NO_PROXY",
        "no_proxy",
    ):
        env.pop(name, None)
    env = {k: v for k, v in env.items() if not k.startswith("OFFLOAD_")}
    return folder, report, env


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# ---------------------------------------------------------------- what each agent is given


def test_each_agent_gets_its_own_settings_and_its_arguments_unchanged(agents):
    folder, report, env = agents
    for name in ("claude", "codex", "opencode", "aider"):
        wrap.standin(folder, name, RECORDER)
    args = ("--flag", "two words", "--", "-p")
    for name in ("claude", "codex", "opencode", "aider"):
        done = run(name, "--quiet", agent_args=args, env=env)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
    claude, codex, opencode, aider = reports(report)
    root = claude["env"]["ANTHROPIC_BASE_URL"]
    assert root.startswith("http://127.0.0.1:") and root.rpartition(":")[2].isdigit()
    assert claude == {"argv": list(args), "env": {"ANTHROPIC_BASE_URL": root}}
    base = codex["argv"][3].partition("=")[2].strip('"')
    assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
    assert codex == {"argv": ["-c", 'model_provider="openai"', "-c", f'openai_base_url="{base}"', *args], "env": {}}
    opencode_base = json.loads(opencode["env"]["OPENCODE_CONFIG_CONTENT"])["provider"]["openai"]["options"]["baseURL"]
    assert opencode == {
        "argv": list(args),
        "env": {
            "OPENCODE_CONFIG_CONTENT": json.dumps(
                {
                    "provider": {
                        "openai": {"options": {"baseURL": opencode_base}},
                        "anthropic": {"options": {"baseURL": opencode_base}},
                    }
                }
            )
        },
    }
    assert opencode_base.endswith("/v1")
    aider_root = aider["env"]["ANTHROPIC_API_BASE"]
    assert aider == {
        "argv": list(args),
        "env": {"OPENAI_API_BASE": f"{aider_root}/v1", "ANTHROPIC_API_BASE": aider_root},
    }


def test_a_users_settings_are_kept_and_their_destination_becomes_the_upstream(agents, upstream):
    folder, report, env = agents
    wrap.standin(folder, "opencode", RECORDER)
    mine = {
        "model": "anthropic/claude-sonnet-4",
        "provider": {"anthropic": {"options": {"baseURL": f"{upstream.url}/v1", "headers": {"X-Team": "a"}}}},
    }
    env.update(OPENCODE_CONFIG_CONTENT=json.dumps(mine), HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="example.com")
    token = wrap.token()
    done = run("opencode", "--keep", "--admin-token", token, env=env)
    try:
        assert done.returncode == 0, done.stderr
        [got] = reports(report)
        config = json.loads(got["env"]["OPENCODE_CONFIG_CONTENT"])
        root = wrap.parse(done.stderr)["url"]
        assert config == {
            "model": "anthropic/claude-sonnet-4",
            "provider": {
                "anthropic": {"options": {"baseURL": f"{root}/v1", "headers": {"X-Team": "a"}}},
                "openai": {"options": {"baseURL": f"{root}/v1"}},
            },
        }
        # the agent's loopback requests never go through the user's HTTP proxy
        assert (got["env"]["NO_PROXY"], got["env"]["no_proxy"]) == ("example.com,127.0.0.1", "127.0.0.1")
        # the kept proxy's Anthropic upstream is where opencode went before: the fake
        upstream.handler = default_handler
        wrap.standin(folder, "claude", ASKS)
        asked = run("claude", "--proxy-url", root, "--admin-token", token, env=env)
        assert asked.returncode == 0, asked.stderr
        assert reports(report)[-1] == {"status": 200, "text": "Hello there"}
        assert [r.path for r in upstream.messages_requests()] == ["/v1/messages"]
        assert wrap.parse(asked.stderr)["requests"] == "1"  # this run's requests only
    finally:
        for pid in wrap.roots(wrap.proxies_with(token)):
            os.kill(pid, signal.SIGTERM)
    assert wrap.wait_gone(wrap.proxies_with(token)) == []


def test_a_running_proxy_is_reused_and_each_run_counts_its_own_requests(agents, upstream, tmp_path):
    folder, report, env = agents
    wrap.standin(folder, "claude", ASKS)
    with ProxyProcess(
        "--anthropic-upstream", upstream.url, "--admin-token", "admin-reuse", data_dir=tmp_path / "s"
    ) as proxy:
        for _ in range(2):
            done = run("claude", "--proxy-url", proxy.url, "--admin-token", "admin-reuse", env=env)
            assert done.returncode == 0, done.stderr
            assert wrap.parse(done.stderr)["requests"] == "1"
        without = run("claude", "--proxy-url", proxy.url, env=env)
        assert without.returncode == 0
        assert one_line(without.stderr) == (
            "offload-proxy: statistics unavailable (the proxy's admin token is needed: --admin-token)"
        )
        assert proxy.proc.poll() is None  # a reused proxy is left running
    assert len(reports(report)) == 3


# ---------------------------------------------------------------- bad input


def test_an_unknown_agent(agents):
    done = run("cursor", env=agents[2])
    assert done.returncode == 2
    assert (
        one_line(done.stderr) == "offload-proxy wrap: unknown agent 'cursor': choose claude, codex, opencode or aider"
    )


def test_an_agent_not_installed_says_how_to_install_it(agents, tmp_path):
    env = {**agents[2], "PATH": str(tmp_path / "empty")}
    expected = {
        "claude": "npm install -g @anthropic-ai/claude-code",
        "codex": "npm install -g @openai/codex",
        "opencode": "npm install -g opencode-ai",
        "aider": "python -m pip install aider-install",
    }
    for name, install in expected.items():
        done = run(name, env=env)
        assert done.returncode == 127
        line = one_line(done.stderr)
        assert line.startswith("offload-proxy wrap: ") and f"({name} is not on PATH): install it with {install}" in line


def test_the_agents_arguments_go_after_the_double_dash(agents):
    wrap.standin(agents[0], "codex", RECORDER)
    done = subprocess.run(wrap.argv("codex", "exec", "hi"), env=agents[2], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "the agent's own arguments go after --, as in: offload-proxy wrap codex -- exec hi" in done.stderr


def test_a_busy_port(agents):
    folder, report, env = agents
    wrap.standin(folder, "claude", RECORDER)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run("claude", "--port", str(port), env=env)
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"offload-proxy wrap: port {port} is in use: choose another with --port, or run "
        f"through the proxy serving there with --proxy-url http://127.0.0.1:{port}"
    )
    assert reports(report) == []  # the agent never ran


def test_an_invalid_setting(agents):
    wrap.standin(agents[0], "claude", RECORDER)
    done = run("claude", "--max-body-bytes", "5", env=agents[2])
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("offload-proxy wrap: invalid --max-body-bytes (env OFFLOAD_MAX_BODY_BYTES)")


def test_a_proxy_that_fails_to_start(agents, tmp_path):
    folder, report, env = agents
    wrap.standin(folder, "claude", RECORDER)
    token = wrap.token()
    (tmp_path / "tenants.toml").write_text("[team\n")
    done = run("claude", "--tenants-file", str(tmp_path / "tenants.toml"), "--admin-token", token, env=env)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith(
        f"offload-proxy wrap: the proxy did not start: invalid --tenants-file {tmp_path}/tenants.toml"
    )
    assert "(log: " in line
    assert reports(report) == [] and wrap.proxies_with(token) == []


def test_an_agent_that_exits_at_once(agents):
    folder, report, env = agents
    wrap.standin(folder, "aider", RECORDER)
    token = wrap.token()
    done = run("aider", "--admin-token", token, env={**env, "STANDIN_STATUS": "3"})
    assert done.returncode == 3
    assert one_line(done.stderr) == "offload-proxy: aider exited with status 3; no request went through the proxy"
    assert wrap.proxies_with(token) == []
    quiet = run("aider", "--quiet", env={**env, "STANDIN_STATUS": "4"})
    assert (quiet.returncode, quiet.stderr) == (4, "")


def test_no_proxy_at_the_proxy_url(agents):
    wrap.standin(agents[0], "claude", RECORDER)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    done = run("claude", "--proxy-url", f"http://127.0.0.1:{port}", env=agents[2])
    assert done.returncode == 1
    assert one_line(done.stderr).startswith(
        f"offload-proxy wrap: no proxy answers at --proxy-url http://127.0.0.1:{port}"
    )
    mixed = run("claude", "--proxy-url", f"http://127.0.0.1:{port}", "--upstream", "http://x", env=agents[2])
    assert mixed.returncode == 2
    assert one_line(mixed.stderr) == (
        "offload-proxy wrap: --upstream: not with --proxy-url (the proxy there runs with its own settings)"
    )


# ---------------------------------------------------------------- signals and the terminal

WAITS = """
report(pid=os.getpid())
signal.signal(signal.SIGTERM, lambda *_: (report(got="SIGTERM"), sys.exit(43)))
time.sleep(120)
"""


def test_the_wrapper_killed_takes_its_proxy_and_its_agent_along(agents):
    folder, report, env = agents
    wrap.standin(folder, "claude", WAITS)
    token = wrap.token()
    wrapper = subprocess.Popen(
        [*wrap.argv("claude", "--admin-token", token), "--"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        while not reports(report):
            assert wrapper.poll() is None, wrapper.stderr.read() if wrapper.stderr else ""
            threading.Event().wait(0.1)
        proxies = wrap.proxies_with(token)
        assert len(wrap.roots(proxies)) == 1
        wrapper.kill()  # SIGKILL: no handler of the wrapper's runs
        wrapper.wait()
        agent = reports(report)[0]["pid"]
        assert wrap.wait_gone([*proxies, agent]) == []
    finally:
        wrapper.kill()
    assert reports(report)[1:] == [{"got": "SIGTERM"}]  # the agent's parent-death signal


def test_sigterm_to_the_wrapper_is_passed_to_the_agent(agents):
    folder, report, env = agents
    wrap.standin(folder, "claude", WAITS)
    token = wrap.token()
    wrapper = subprocess.Popen(
        [*wrap.argv("claude", "--admin-token", token), "--"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not reports(report):
        threading.Event().wait(0.1)
    wrapper.send_signal(signal.SIGTERM)
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 43
    assert reports(report)[1:] == [{"got": "SIGTERM"}]
    assert one_line(stderr) == "offload-proxy: Claude Code exited with status 43; no request went through the proxy"
    assert wrap.proxies_with(token) == []


IN_A_TERMINAL = """
import fcntl, struct, termios
def size():
    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(1, termios.TIOCGWINSZ, b"\\0" * 8))
    return [rows, cols]
signal.signal(signal.SIGWINCH, lambda *_: report(resized=size()))
signal.signal(signal.SIGINT, lambda *_: (report(got="SIGINT"), sys.exit(42)))
report(tty=[os.isatty(0), os.isatty(1), os.isatty(2)], term=os.environ.get("TERM"), size=size(),
       foreground=os.tcgetpgrp(0) == os.getpgrp())
time.sleep(120)
"""


def test_in_a_terminal_the_agent_has_it_and_ctrl_c_is_the_agents(agents):
    folder, report, env = agents
    wrap.standin(folder, "codex", IN_A_TERMINAL)
    token = wrap.token()
    argv = [*wrap.argv("codex", "--admin-token", token, "--keep"), "--"]
    pid, terminal = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, {**env, "TERM": "xterm-256color"})
    try:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 132, 0, 0))
        while not reports(report):
            threading.Event().wait(0.1)
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))  # the window resized
        while len(reports(report)) < 2:
            threading.Event().wait(0.1)
        os.write(terminal, b"\x03")
        _, status = os.waitpid(pid, 0)
        first, resized, interrupted = reports(report)
        assert first == {"tty": [True, True, True], "term": "xterm-256color", "size": [40, 132], "foreground": True}
        assert resized == {"resized": [50, 160]}
        assert interrupted == {"got": "SIGINT"}
        assert os.waitstatus_to_exitcode(status) == 42  # the agent's status
        kept = wrap.roots(wrap.proxies_with(token))
        assert len(kept) == 1  # the terminal's Ctrl-C never reached the proxy (--keep left it up)
    finally:
        for proxy in wrap.roots(wrap.proxies_with(token)):
            os.kill(proxy, signal.SIGTERM)
        os.close(terminal)
    assert wrap.wait_gone(wrap.proxies_with(token)) == []
