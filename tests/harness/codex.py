"""The real Codex CLI (npm `@openai/codex`) for end-to-end tests, offline.

`install()` puts a pinned version under `<repo>/.cache/npm-codex/<version>` once (`npm install --prefix`)
and reuses it afterwards. `Codex` runs `codex exec --json --strict-config` (a key this version
does not know is an error, not silently ignored) with a CODEX_HOME of its own whose config.toml
names one model provider (the given base URL, `wire_api = "responses"`, HTTP/SSE only; named
"OpenAI" when a test wants Codex's remote compaction: `OPENAI_NAME`), no update
check, no analytics, no plugins, and every proxy variable pointing at a `Trap`: whatever Codex
would fetch from the internet (the plugin marketplace at github.com, chatgpt.com, …) reaches the
trap instead, which records the request line and hangs up. Loopback bypasses it (`NO_PROXY`).

What Codex 0.169 sends (see tests/unit/formats/test_responses.py for trimmed copies): `stream:
true`, `store: false`, `include: ["reasoning.encrypted_content"]`, no `previous_response_id`;
its shell tool is the function `exec_command` (`{"cmd": "...", "login": false}`); it waits for
`response.output_item.done` events and `response.completed`.
"""

from __future__ import annotations

import json
import os
import shutil
import socketserver
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.installs import exclusive

CODEX_VERSION = "0.171.0"
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "npm-codex" / CODEX_VERSION  # one folder per pin: branches pinning others share .cache
MODEL = "gpt-5-codex"
API_KEY_ENV = "FAKE_OPENAI_API_KEY"


def installed_version(binary: Path) -> str | None:
    if not binary.exists():
        return None
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().rpartition(" ")[2] or None


def install(cache: Path = CACHE, version: str = CODEX_VERSION) -> Path:
    """The `codex` launcher of `@openai/codex@version` under `cache`, installed if it is not there
    (by one process at a time: the others wait, then find it)."""
    with exclusive(cache):
        return _install(cache, version)


def _install(cache: Path, version: str) -> Path:
    binary = cache / "node_modules" / ".bin" / "codex"
    if installed_version(binary) == version:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH")
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", f"@openai/codex@{version}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"npm install @openai/codex@{version} failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    got = installed_version(binary)
    if got != version:
        raise RuntimeError(f"npm installed codex {got!r}, not {version}")
    return binary


# Where tiktoken downloads its encodings: a wrapped proxy on a machine without them cached (a clean
# clone, no ../shared/tiktoken) tries it once through the trap, is refused, and counts by estimate.
# The trap is there for the agent's own connections.
TIKTOKEN_DOWNLOADS = "CONNECT openaipublic.blob.core.windows.net:443 "


def agent_connections(seen: list[str]) -> list[str]:
    """The trapped connection lines, the proxy's tiktoken download left out."""
    return [line for line in seen if not line.startswith(TIKTOKEN_DOWNLOADS)]


class Trap:
    """A loopback 'HTTP proxy' that records the first line of every connection and closes it."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                seen.append(self.rfile.readline(2000).decode("latin-1").strip())

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Trap":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


# Codex 0.171 compacts remotely ("compaction v2": a `/responses` request ending in
# `{"type": "compaction_trigger"}`, answered with one `compaction` item) only for a provider it
# takes for OpenAI's: the built-in one (`openai_base_url`), or one whose `name` is "OpenAI"
# (`ModelProviderInfo::is_openai`); any other compacts locally. The built-in provider tries the
# Responses WebSocket transport first; a provider of one's own named "OpenAI" with
# `supports_websockets = false` goes over HTTP/SSE alone.
OPENAI_NAME = "OpenAI"


def _common(model: str) -> str:
    """What every config of the harness says besides its provider: the model, no update check,
    no analytics, no plugins, no endless retries."""
    return f"""\
model = "{model}"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
# Without this, startup syncs the plugin marketplace (github.com, api.github.com, chatgpt.com).
plugins = false
remote_plugin = false
apps = false
# A failed request fails the run at once instead of being retried forever.
unbounded_connection_retries = false
"""


def config_toml(base_url: str, model: str = MODEL, provider_name: str = "fake") -> str:
    return f"""\
model_provider = "fake"
{_common(model)}
[model_providers.fake]
name = "{provider_name}"
base_url = "{base_url}"
env_key = "{API_KEY_ENV}"
wire_api = "responses"
supports_websockets = false
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 30000
"""


def builtin_config_toml(base_url: str, model: str = MODEL) -> str:
    """Codex's built-in OpenAI provider with only its base URL changed (`openai_base_url`, the
    key Codex documents for a proxy or gateway): it then speaks the Responses WebSocket mode
    first, as it does to api.openai.com. The API key comes from CODEX_API_KEY."""
    return f"""\
openai_base_url = "{base_url}"
{_common(model)}"""


WEBSOCKET_FALLBACK = "Falling back from WebSockets to HTTPS transport"


@dataclass
class Run:
    """One `codex exec --json` run: its exit code, output, JSONL events and what the trap caught."""

    returncode: int
    stdout: str
    stderr: str
    events: list[dict] = field(default_factory=list)
    trapped: list[str] = field(default_factory=list)

    def items(self, kind: str | None = None) -> list[dict]:
        """The completed items (`agent_message`, `command_execution`, …), in order."""
        return [
            e["item"]
            for e in self.events
            if e.get("type") == "item.completed" and (kind is None or e["item"].get("type") == kind)
        ]

    def usage(self) -> dict:
        [done] = [e for e in self.events if e.get("type") == "turn.completed"]
        return done["usage"]


@dataclass
class Codex:
    binary: Path
    home: Path  # CODEX_HOME
    workdir: Path
    base_url: str  # the provider's base URL, ending in /v1
    provider_name: str = "fake"  # OPENAI_NAME: Codex compacts remotely (compaction v2) through it
    builtin: bool = False  # the built-in OpenAI provider with `openai_base_url` (else a custom provider)
    # the command line before Codex's own arguments (default: the binary): e.g. `offload-proxy wrap codex … --`
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # more environment, last word

    def run(self, prompt: str, *options: str, timeout: float = 120) -> Run:
        """`codex exec --json … <options> <prompt>`: a new session."""
        return self._exec([*options, prompt], timeout)

    def resume(self, prompt: str, *options: str, timeout: float = 120) -> Run:
        """`codex exec --json … resume --last <options> <prompt>`: the next turn of the last session."""
        return self._exec(["resume", "--last", *options, prompt], timeout)

    def _exec(self, args: list[str], timeout: float) -> Run:
        self.home.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = (
            builtin_config_toml(self.base_url)
            if self.builtin
            else config_toml(self.base_url, provider_name=self.provider_name)
        )
        (self.home / "config.toml").write_text(config)
        with Trap() as trap:
            proxy_env = {name: trap.url for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")}
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(self.home),
                "CODEX_HOME": str(self.home),
                API_KEY_ENV: "sk-codex-test",
                "LANG": "C.UTF-8",
                **({"CODEX_API_KEY": "sk-codex-test", "RUST_LOG": "codex_api=info"} if self.builtin else {}),
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                **proxy_env,
                **{k.lower(): v for k, v in proxy_env.items()},
                **self.env,
            }
            argv = [
                *(self.prefix or [str(self.binary)]),
                "exec",
                "--json",
                "--strict-config",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                *args,
            ]
            with open(os.devnull, "rb") as stdin:
                done = subprocess.run(
                    argv, cwd=self.workdir, env=env, stdin=stdin, capture_output=True, text=True, timeout=timeout
                )
            trapped = agent_connections(trap.seen)
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return Run(done.returncode, done.stdout, done.stderr, events, trapped)
