"""`offload-proxy wrap` attacked, with stand-in agents (tests/e2e/test_wrap.py's): signals while
the proxy is still starting, an agent killed by a signal, a terminal or stderr that is gone, a
`--proxy-url` that is not the proxy (HTML, a server that answers a byte at a time or without end,
garbage), malformed URLs and hosts, an agent's destination pointing at the proxy itself, the
proxy's secrets in the agent's environment, and the proxy gone during the run. Each: one line at
most, never a traceback, never a hang, the agent's status kept, and no proxy or run folder left.
"""

from __future__ import annotations

import os
import pty
import resource
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.test_wrap import RECORDER, agents, one_line, reports, run  # noqa: F401 (agents: the fixture)
from tests.harness import wrap


def run_folders(env: dict[str, str]) -> list[str]:
    return sorted(p.name for p in Path(env["TMPDIR"]).glob("offload-wrap-*"))


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Error:" not in stderr, stderr


# ---------------------------------------------------------------- exit statuses

KILLS_ITSELF = """
import resource
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the agent's own core file is not what is tested
os.kill(os.getpid(), int(os.environ["STANDIN_SIGNAL"]))
"""


def test_an_agent_killed_by_a_signal_ends_the_wrapper_with_it_and_no_core_file_of_the_wrappers(agents, tmp_path):
    """The shell sees what it would have seen without wrap (death by the agent's signal, `Killed`
    for an agent the OOM killer took); the wrapper never dumps a core file of its own in the
    user's folder when the agent crashed (core files allowed, as a developer's shell may)."""
    folder, report, env = agents
    wrap.standin(folder, "claude", KILLS_ITSELF)
    work = tmp_path / "work"
    work.mkdir()
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    try:
        for signum in (signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV, signal.SIGTERM):
            err = tmp_path / f"stderr-{signum}"
            with open(err, "wb") as out, open(os.devnull, "rb") as nothing:
                argv = [*wrap.argv("claude"), "--"]
                actions = [(os.POSIX_SPAWN_DUP2, nothing.fileno(), 0), (os.POSIX_SPAWN_DUP2, out.fileno(), 2)]
                previous = os.getcwd()
                os.chdir(work)
                try:
                    pid = os.posix_spawn(
                        argv[0], argv, {**env, "STANDIN_SIGNAL": str(int(signum))}, file_actions=actions
                    )
                finally:
                    os.chdir(previous)
            _, status = os.waitpid(pid, 0)
            stderr = err.read_text()
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signum, (status, stderr)
            assert not os.WCOREDUMP(status), stderr
            assert one_line(stderr) == (
                f"offload-proxy: Claude Code exited with status {128 + signum}; no request went through the proxy"
            )
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    assert list(work.iterdir()) == []


def test_a_closed_stderr_keeps_the_agents_status(agents):
    folder, report, env = agents
    wrap.standin(folder, "aider", RECORDER)
    read, write = os.pipe()
    os.close(read)  # `wrap … 2>&1 | head -1` after head is gone
    try:
        done = subprocess.run(
            [*wrap.argv("aider"), "--"],
            env={**env, "STANDIN_STATUS": "5"},
            timeout=120,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=write,
        )
    finally:
        os.close(write)
    assert done.returncode == 5


HANGS_UP = """
signal.signal(signal.SIGHUP, lambda *_: (report(got="SIGHUP"), sys.exit(5)))
report(up=True)
time.sleep(120)
"""


def test_the_terminal_closed_the_agent_gets_sighup_and_its_status_stands(agents):
    folder, report, env = agents
    wrap.standin(folder, "claude", HANGS_UP)
    token = wrap.token()
    argv = [*wrap.argv("claude", "--admin-token", token), "--"]
    pid, terminal = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, env)
    while not reports(report):
        time.sleep(0.1)
    os.close(terminal)  # the terminal window closed: SIGHUP, and the exit line cannot be written
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 5
    assert reports(report)[1:] == [{"got": "SIGHUP"}]
    assert wrap.wait_gone(wrap.proxies_with(token)) == []


# ---------------------------------------------------------------- signals while the proxy starts

SLOW_START = """
import os, time
if os.environ.get("OFFLOAD_ADMIN_TOKEN", "").startswith("slow-start-"):  # the proxy child only
    with open(os.environ["STANDIN_REPORT"], "a") as out:
        out.write('{"proxy": %d}\\n' % os.getpid())
    time.sleep(300)
"""


@pytest.fixture
def slow_proxy(agents, tmp_path):
    """`agents`, where the proxy child started with an admin token `slow-start-…` reports its pid and
    never gets ready (a sitecustomize on its PYTHONPATH): the wrapper is waiting for it."""
    folder, report, env = agents
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    env = {**env, "PYTHONPATH": os.pathsep.join([str(site), env["PYTHONPATH"]])}
    wrap.standin(folder, "claude", RECORDER)
    return folder, report, env


@contextmanager
def starting(report: Path, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen, int]]:
    """The wrapper, and the pid of its proxy child, once that child is running and not yet ready."""
    wrapper = subprocess.Popen(
        [*wrap.argv("claude", "--admin-token", "slow-start-" + wrap.token()), "--"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not reports(report):
            assert wrapper.poll() is None, wrapper.communicate()
            time.sleep(0.1)
        yield wrapper, reports(report)[0]["proxy"]
    finally:
        wrapper.kill()
        wrapper.wait()
        report.unlink(missing_ok=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_proxy_starts_stops_it_and_leaves_nothing(slow_proxy, signum):
    """Ctrl-C, a SIGTERM, the terminal closed while the wrapper waits for its proxy: the proxy is
    stopped, the run folder removed, no traceback, and the wrapper dies of that signal (as a shell
    expects of a program it interrupted)."""
    folder, report, env = slow_proxy
    with starting(report, env) as (wrapper, proxy):
        wrapper.send_signal(signum)
        _, stderr = wrapper.communicate(timeout=60)
        assert (wrapper.returncode, stderr) == (-signum, "")
        assert wrap.wait_gone([proxy]) == []
        assert run_folders(env) == []


def test_the_wrapper_sigkilled_while_the_proxy_starts_takes_the_proxy_along(slow_proxy):
    folder, report, env = slow_proxy
    with starting(report, env) as (wrapper, proxy):
        wrapper.kill()
        wrapper.wait()
        assert wrap.wait_gone([proxy]) == []  # the parent-death signal is set before the proxy runs a line


# ---------------------------------------------------------------- --proxy-url that is not the proxy


def http_answer(body: bytes, status: str = "200 OK", headers: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


def drip_headers(sock: socket.socket) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\n")
    while True:
        sock.sendall(b"X")
        time.sleep(0.5)


def drip_body(sock: socket.socket) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    while True:
        sock.sendall(b" ")
        time.sleep(0.5)


def endless_body(sock: socket.socket) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    while True:
        sock.sendall(b" " * 65536)


def stats_of_other_types(sock: socket.socket, request: bytes) -> None:
    if b"/healthz" in request:
        sock.sendall(http_answer(b'{"status": "ok"}'))
    else:
        sock.sendall(http_answer(b'{"totals": {"requests": [1], "tokens_before": {}}, "recorder": {"queued": "x"}}'))


SERVERS: dict[str, Callable[..., None]] = {
    "html": lambda sock: sock.sendall(
        http_answer(b"<html><body>It works!</body></html>", headers="Content-Type: text/html\r\n")
    ),
    "hangs": lambda sock: time.sleep(300),
    "drips headers": drip_headers,
    "drips a body": drip_body,
    "answers without end": endless_body,
    "garbage": lambda sock: sock.sendall(b"garbage\r\n\r\n"),
    "half an answer": lambda sock: sock.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"status"'),
    "deep JSON": lambda sock: sock.sendall(http_answer(b"[" * 100_000 + b"]" * 100_000)),
}


@contextmanager
def serving(behaviour: Callable[..., None]) -> Iterator[str]:
    """A loopback HTTP server that answers every request with `behaviour(sock[, request])`."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer(sock: socket.socket) -> None:
        with sock:
            try:
                request = sock.recv(65536)
                if behaviour.__code__.co_argcount == 2:
                    behaviour(sock, request)
                else:
                    behaviour(sock)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(sock,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


@pytest.mark.parametrize("server", list(SERVERS))
def test_a_proxy_url_that_is_not_the_proxy_is_one_line_never_a_hang(agents, server):
    folder, report, env = agents
    wrap.standin(folder, "claude", RECORDER)
    with serving(SERVERS[server]) as url:
        done = run("claude", "--proxy-url", url, env=env, timeout=90)  # a bound on a hang, not a speed target
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"offload-proxy wrap: ") and f"--proxy-url {url}" in line
    assert reports(report) == []  # the agent never ran


def test_statistics_of_other_types_leave_the_agents_status_and_one_line(agents):
    folder, report, env = agents
    wrap.standin(folder, "claude", RECORDER)
    with serving(stats_of_other_types) as url:
        done = run("claude", "--proxy-url", url, "--admin-token", "t", env={**env, "STANDIN_STATUS": "3"})
    assert done.returncode == 3
    assert one_line(done.stderr).startswith("offload-proxy: Claude Code exited with status 3; statistics unavailable")


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://127.0.0.1:abc",
        "http://127.0.0.1:99999",
        "http://exa mple.com",
        "http://127.0.0.1:9/?x=1",
        "http://127.0.0.1:9/#top",
        "http://me:s3cret@127.0.0.1:9",
    ],
)
def test_a_malformed_proxy_url_is_one_line_and_never_shows_a_password(agents, url):
    wrap.standin(agents[0], "claude", RECORDER)
    done = run("claude", "--proxy-url", url, env=agents[2])
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr).startswith("offload-proxy wrap: --proxy-url ")
    assert "s3cret" not in done.stderr


@pytest.mark.parametrize(
    ("host", "says"), [("999.1.1.1", "cannot be resolved"), ("192.0.2.1", "cannot listen on 192.0.2.1")]
)
def test_a_host_it_cannot_listen_on_without_a_port(agents, host, says):
    folder, report, env = agents
    wrap.standin(folder, "claude", RECORDER)
    done = run("claude", "--host", host, env=env)
    assert done.returncode == 1, done.stderr
    assert says in one_line(done.stderr)
    assert reports(report) == [] and run_folders(env) == []


# ---------------------------------------------------------------- where the agent went before


def test_an_agents_destination_that_is_not_a_url_is_named_as_the_user_set_it(agents):
    folder, report, env = agents
    wrap.standin(folder, "claude", RECORDER)
    done = run("claude", env={**env, "ANTHROPIC_BASE_URL": "http://"})
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "ANTHROPIC_BASE_URL 'http://'" in line and "OFFLOAD_ANTHROPIC_UPSTREAM" not in line
    assert reports(report) == []


def test_an_agents_destination_at_the_proxys_own_address_is_refused_not_a_loop(agents):
    """ANTHROPIC_BASE_URL left at a proxy of the user's that is not running, and wrap listening on
    that port: the proxy would send every request to itself (a thousand nested requests, then an
    error); refused before the agent starts."""
    folder, report, env = agents
    wrap.standin(folder, "claude", RECORDER)
    port = wrap_free_port()
    for variable in ("ANTHROPIC_BASE_URL", "OFFLOAD_ANTHROPIC_UPSTREAM"):
        for address in (f"http://127.0.0.1:{port}", f"http://localhost:{port}/"):
            done = run("claude", "--port", str(port), env={**env, variable: address})
            assert done.returncode == 2, done.stderr
            assert f"{variable} {address!r} is this proxy's own address" in one_line(done.stderr)
    assert reports(report) == []


def wrap_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------- secrets

SECRETS = {
    "OFFLOAD_ADMIN_TOKEN": "admin-S3CR3T",
    "OFFLOAD_ENCRYPTION_KEY": "enc-S3CR3T-0123456789abcdef",
    "OFFLOAD_NAMESPACE_KEY": "ns-S3CR3T-0123456789abcdef",
}
LISTS_ITS_ENVIRONMENT = """
import glob, re
port = re.search(r":(\\d+)/v1", " ".join(sys.argv)).group(1).encode()
proxy_token = None  # the admin token its proxy runs with, read where a process of the user's can
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        items = dict(item.split(b"=", 1) for item in open(path, "rb").read().split(b"\\0") if b"=" in item)
    except OSError:
        continue
    if items.get(b"OFFLOAD_PORT") == port and b"OFFLOAD_ADMIN_TOKEN" in items:
        proxy_token = items[b"OFFLOAD_ADMIN_TOKEN"].decode()
report(offload=sorted(k for k in os.environ if k.startswith("OFFLOAD_")),
       values=[v for v in os.environ.values() if "S3CR3T" in v or v == proxy_token],
       found=proxy_token is not None, in_argv=any(proxy_token in arg for arg in sys.argv))
"""


def test_the_agent_never_gets_the_proxys_secrets_and_the_run_folder_is_private(agents):
    folder, report, env = agents
    wrap.standin(folder, "codex", LISTS_ITS_ENVIRONMENT)
    done = run("codex", "--keep", env={**env, **SECRETS, "OFFLOAD_LOG_FORMAT": "text"})
    try:
        assert done.returncode == 0, done.stderr
        assert reports(report) == [{"offload": ["OFFLOAD_LOG_FORMAT"], "values": [], "found": True, "in_argv": False}]
        [kept] = run_folders(env)
        run_folder = Path(env["TMPDIR"]) / kept
        assert stat.S_IMODE(run_folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((run_folder / "proxy.log").stat().st_mode) == 0o600
        log = (run_folder / "proxy.log").read_text()
        assert log and not any(secret in log for secret in SECRETS.values())
    finally:
        for pid in wrap.roots(wrap.proxies_with("admin-S3CR3T")):
            os.kill(pid, signal.SIGTERM)
    assert wrap.wait_gone(wrap.proxies_with("admin-S3CR3T")) == []
    generated = run("codex", env=env)  # the token wrap generates is in no argv, and not in the agent's environment
    assert generated.returncode == 0, generated.stderr
    assert reports(report)[-1] == {"offload": [], "values": [], "found": True, "in_argv": False}


# the settings read OFFLOAD_* names lower-cased (pydantic-settings): each of these configures the proxy
SPELT_SECRETS = {
    "offload_encryption_key": "enc-S3CR3T-0123456789abcdef",
    "Offload_Namespace_Key": "ns-S3CR3T-0123456789ab",
    "oFFLOAD_aDMIN_tOKEN": "admin-S3CR3T-spelt",
    "oFFLOAD_uPSTREAM_API_\u212aEY": "sk-S3CR3T-kelvin",
    "offload_Redis_Url": "redis://:S3CR3T@127.0.0.1:1/0",
}
LISTS_ITS_OFFLOAD_VARIABLES = """
report(offload=sorted(k for k in os.environ if k.lower().startswith("offload_")),
       values=[v for v in os.environ.values() if "S3CR3T" in v])
"""


@pytest.mark.parametrize("reused", [False, True])
def test_the_proxys_secrets_in_any_spelling_never_reach_the_agent(agents, make_proxy, reused):
    """A secret's variable in another case, or with a character that lower-cases to its letter (the
    Kelvin sign for K), is read by the settings as the secret: it is removed from the agent's
    environment as the canonical spelling is, also with --proxy-url; the proxy's other settings stay."""
    folder, report, env = agents
    wrap.standin(folder, "codex", LISTS_ITS_OFFLOAD_VARIABLES)
    spelt = {k: v for k, v in SPELT_SECRETS.items() if reused or "REDIS" not in k.upper()}  # no Redis to start with
    env = {**env, **spelt, "offload_log_format": "text"}
    if reused:
        with make_proxy() as url:
            done = run("codex", "--quiet", "--proxy-url", url, env=env)
    else:
        done = run("codex", "--quiet", env=env)
    assert done.returncode == 0, done.stderr
    assert reports(report) == [{"offload": ["offload_log_format"], "values": []}]


# ---------------------------------------------------------------- the proxy gone during the run

KILLS_THE_PROXY = """
import glob
wanted = ("OFFLOAD_ADMIN_TOKEN=" + os.environ["STANDIN_TOKEN"]).encode()
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        if wanted in open(path, "rb").read().split(b"\\0"):
            os.kill(int(path.split("/")[2]), signal.SIGKILL)
    except OSError:
        pass
sys.exit(7)
"""


def test_the_proxy_gone_during_the_run_the_line_says_so_and_the_status_stands(agents):
    folder, report, env = agents
    wrap.standin(folder, "claude", KILLS_THE_PROXY)
    token = wrap.token()
    done = run("claude", "--admin-token", token, env={**env, "STANDIN_TOKEN": token})
    assert done.returncode == 7
    line = one_line(done.stderr)
    assert line.startswith(
        "offload-proxy: Claude Code exited with status 7; statistics unavailable (the proxy did not answer"
    ), line
    assert "admin token is needed" not in line
    assert wrap.proxies_with(token) == []
    no_traceback(done.stderr)


# ---------------------------------------------------------------- signals ignored before wrap

DISPOSITIONS = """
report(hup=signal.getsignal(signal.SIGHUP) == signal.SIG_IGN, int=signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
       term=signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)
"""


def test_signals_ignored_before_wrap_stay_ignored_for_the_agent(agents):
    """`nohup offload-proxy wrap codex -- exec …`, or a background job of a script (SIGINT ignored):
    the agent ignores them as it would without wrap, and a hangup does not reach it through wrap."""
    folder, report, env = agents
    wrap.standin(folder, "codex", DISPOSITIONS)

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    done = run("codex", env=env, preexec_fn=nohup)
    assert done.returncode == 0, done.stderr
    plain = run("codex", env=env)
    assert plain.returncode == 0, plain.stderr
    assert reports(report) == [{"hup": True, "int": True, "term": False}, {"hup": False, "int": False, "term": False}]
