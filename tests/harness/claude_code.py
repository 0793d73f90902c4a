"""The real Claude Code CLI (npm `@anthropic-ai/claude-code`) for end-to-end tests, offline.

`install()` puts a pinned version under `<repo>/.cache/npm-claude-code` once (`npm install
--prefix`) and reuses it afterwards. 2.x ships a native (Bun-compiled) executable in a platform
package (`@anthropic-ai/claude-code-linux-x64`, …); its postinstall copies it over the
`bin/claude.exe` placeholder. The package's `engines` says node >= 22, but node only runs that
postinstall (npm warns EBADENGINE on node 20 and installs anyway): the CLI itself needs no node.

`ClaudeCode` runs `claude -p --output-format stream-json --verbose --permission-mode
bypassPermissions -- <prompt>` in a working directory of the test's, with `ANTHROPIC_BASE_URL`
the given URL (no `/v1`: Claude Code adds `/v1/messages`), `ANTHROPIC_API_KEY` a fake key,
optional `ANTHROPIC_CUSTOM_HEADERS`, a HOME and `CLAUDE_CONFIG_DIR` of its own (settings.json
there), no telemetry, no error reporting, no updater, no nonessential traffic, no retries
(`CLAUDE_CODE_MAX_RETRIES=0`), no non-streamed fallback, `IS_SANDBOX=1` (bypassPermissions
refuses root otherwise), and every proxy variable pointing at a `Trap` (tests/harness/
codex.py): whatever Claude Code would fetch from the internet reaches the trap, which records
the request line and hangs up. Loopback bypasses it (`NO_PROXY`). `resume()` is `--continue`:
the next turn of the last session in that working directory (same HOME and workdir). `Run`
reads the stream-json events: `text` (the final answer), `tool_uses("Bash")`, `tool_results()`,
`usage()` (summed over the rounds), `result` (`is_error`, `api_error_status`, `num_turns`).

What Claude Code 2.1.330 sends, per `-p` run (measured against a scripted fake upstream):

- Only `POST <base URL path>/v1/messages?beta=true` (a base URL `http://h:p/x/` gives
  `/x/v1/messages?beta=true`), one per model round, streamed, strictly one after the other:
  no `count_tokens`, no `/v1/models`, no title or quota request, nothing else to the base URL.
  Without `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` it also opens 3-5 `CONNECT
  api.anthropic.com:443` (feature flags, metrics, event logging: not to the base URL), which
  the trap catches; `DISABLE_TELEMETRY=1` alone leaves 3 of them. Other versions
  or modes can make side requests (querySource `quota_check`: `max_tokens: 1`, messages
  `[{"role": "user", "content": "quota"}]`; `generate_session_title`, `prompt_suggestion`,
  `tool_use_summary_generation`, `extract_memories`, `compact`, …): `is_main_request` tells
  the conversation's requests (Claude Code's tool list, with `Bash`) from those.
- Headers: `x-api-key: <ANTHROPIC_API_KEY>` (no `Authorization`; `ANTHROPIC_AUTH_TOKEN` would
  send `Authorization: Bearer`), `anthropic-version: 2023-06-01`, `anthropic-beta:
  claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,
  per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,
  thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24`,
  `anthropic-dangerous-direct-browser-access: true`, `x-app: cli`, `User-Agent:
  claude-cli/2.1.330 (external, sdk-cli)`, `X-Claude-Code-Session-Id: <uuid>`,
  `X-Stainless-*` (`X-Stainless-Retry-Count: 0`, `X-Stainless-Timeout: 600`),
  `Accept: application/json`, `Accept-Encoding: gzip, deflate, br, zstd`, `Connection:
  keep-alive`, and each `ANTHROPIC_CUSTOM_HEADERS` line as a header (`X-Test-One: alpha`).
  The body is plain JSON (Content-Length; gzip only if CLAUDE_CODE_GZIP_REQUEST_BODY_LEVEL
  is set or a server-side flag turns it on).
- Body keys, in this order: `model` (`claude-opus-5-5` by default), `messages`, `system`,
  `tools`, `metadata` (`{"user_id": "<a JSON string: device_id, account_uuid, session_id>"}`),
  `max_tokens` (128000), `thinking` (`{"type": "adaptive", "display": "updates"}` as run here;
  `"display": "omitted"` with `--output-format json` or text),
  `context_management` (`{"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}`),
  `output_config` (`{"effort": "medium"}`), `stream: true`.
- `system`: three text blocks: `x-anthropic-billing-header: cc_version=2.1.330.572;
  cc_entrypoint=sdk-cli;` (no cache_control), "You are a Claude agent, built on Anthropic's
  Claude Agent SDK." and the ~7 KB prompt, both `cache_control: {"type": "ephemeral"}`.
- `tools` (~32 KB, the same list every round): Agent, Bash, Edit, ListAgents, Read,
  ReportFindings, ScheduleWakeup, Skill, ToolSearch, Workflow, DeferredToolPlaceholder
  (`defer_loading: true`), Write. Bash's input schema: `command` (required), `timeout`,
  `description`, `run_in_background`, `dangerouslyDisableSandbox`; `additionalProperties: false`.
- `messages`: a user message of two text blocks (a `<system-reminder>` about commit
  attribution, then the prompt), then a message with **role `system`** and a message-level
  `output_config: {"effort": "medium"}` (per-turn-control beta) whose content, "# Environment
  …", is one text block with cache_control in the first request and the same text as a plain
  string in every later one; then per round an assistant message (the text and tool_use
  blocks as the fake streamed them) and a user message of `tool_result` blocks
  (`{"tool_use_id", "type": "tool_result", "content": "<str>", "is_error": false}`). The one
  message breakpoint (`cache_control: {"type": "ephemeral"}`) is on the last block of the last
  message: the system message's block in the first request, then the last tool_result (earlier
  ones lose it), then on a `--continue` turn the new prompt's text block. Apart from that
  breakpoint and the system message's first form, every round and `--continue` turn resends
  the earlier messages, `system` and `tools` unchanged; `metadata.user_id` (its session id)
  stays the same across `--continue`. A `--continue` turn's user message is the prompt alone.
- After a few tool rounds with no text from the model (seen on the 6th request of a run whose 5
  answers were Bash calls alone), the request ends with one more message of role `system`
  after the last tool_result message: "The user hasn't heard from you in a while. As you
  continue, keep them updated when there's something to tell — a finding, a change of plan."
  (one text block, carrying the message breakpoint).
- Tool output is trimmed (no trailing newline or spaces): `cat f` comes back as `f.strip()`.
- Bash output longer than `bashOutputMaxChars` (settings.json; default 30000, clamped to
  4000-128000) is not sent: Claude Code saves it under CLAUDE_CONFIG_DIR/projects/…/
  tool-results/ and sends `<persisted-output>\\nOutput too large (196.3KB). Full output saved
  to: <path>\\n\\nPreview (first 2KB):\\n…\\n</persisted-output>`. A test that wants the proxy
  to see a large tool result keeps it under 128000 characters with
  `settings={"bashOutputMaxChars": 128000}` (the default here: `SETTINGS`).

What the fake upstream must answer (`text_stream`, `tool_use_stream`, `bash_tool_use_stream`
build the SSE bodies; `message_json` a non-streamed one): `200`, `content-type:
text/event-stream`, `event: <type>\\ndata: <json>\\n\\n` for message_start (message with id,
model, empty content, usage), per block content_block_start / content_block_delta
(`text_delta`, or `input_json_delta` pieces of the tool input; `content_block_start` of a
tool_use has `input: {}`) / content_block_stop, message_delta (`stop_reason`: `tool_use` or
`end_turn`, usage.output_tokens) and message_stop. Claude Code runs every tool_use of a
`tool_use` answer and sends the results in the next request; an `end_turn` text ends the run,
and that text is the run's result (`Run.text`). Each answer needs a message id of its own:
answers with the same id are merged into one assistant message (and their tool_results into
one user message) in the next request.

Failures: an HTTP 500 ends the run at once with exit code 1 and a result event `is_error: true,
api_error_status: 500, result: "API Error: 500 <error.message>. …"` (its `subtype` still says
"success"). A stream that ends without message_stop: exit 1, `"API Error: Connection to the API
was lost (StreamTruncated)…"`; Claude Code's default (CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK
unset) would instead repeat the request with `stream: false, max_tokens: 64000` and take a JSON
answer. `--dangerously-skip-permissions` / bypassPermissions as root without IS_SANDBOX=1: exit 1,
"cannot be used with root/sudo privileges". `--output-format stream-json` needs `--verbose`.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.codex import Trap, agent_connections
from tests.harness.installs import exclusive

CLAUDE_CODE_VERSION = "2.1.330"
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "npm-claude-code"
PACKAGE = "@anthropic-ai/claude-code"
API_KEY = "sk-ant-claude-code-test"
DEFAULT_MODEL = "claude-opus-5-5"  # what 2.1.330 asks for without --model
SETTINGS = {"bashOutputMaxChars": 128000}  # the most Bash output Claude Code sends inline


def installed_version(binary: Path) -> str | None:
    """`2.1.330` from `2.1.330 (Claude Code)`, or None if `binary` does not run."""
    if not binary.exists():
        return None
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    return words[0] if out.returncode == 0 and words else None


def _binaries(cache: Path) -> list[Path]:
    """The launcher, then the platform package's executable (if npm skipped the postinstall that
    copies it over the launcher's placeholder, the latter still runs)."""
    modules = cache / "node_modules"
    return [
        modules / ".bin" / "claude",
        *map(Path, sorted(glob.glob(str(modules / "@anthropic-ai" / "claude-code-*" / "claude")))),
    ]


def install(cache: Path = CACHE, version: str = CLAUDE_CODE_VERSION) -> Path:
    """The `claude` executable of `@anthropic-ai/claude-code@version` under `cache`, installed if
    it is not there (by one process at a time: the others wait, then find it)."""
    with exclusive(cache):
        return _install(cache, version)


def _install(cache: Path, version: str) -> Path:
    for binary in _binaries(cache):
        if installed_version(binary) == version:
            return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH")
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", f"{PACKAGE}@{version}"],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"npm install {PACKAGE}@{version} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    found = {str(b): installed_version(b) for b in _binaries(cache)}
    for binary, got in found.items():
        if got == version:
            return Path(binary)
    raise RuntimeError(f"npm installed no claude {version} under {cache}: {found}")


# ---------------------------------------------------------------- the fake upstream's answers

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):06d}"


def usage(input_tokens: int = 100, output_tokens: int = 10, *, cache_read: int = 0, cache_creation: int = 0) -> dict:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": output_tokens,
    }


_usage = usage  # for the builders below, whose `usage` parameter hides the function


def sse(event: dict) -> bytes:
    """One SSE event: `event: <type>` and the JSON data line."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _stream(
    blocks: list[tuple[dict, list[dict]]], stop_reason: str, *, model: str, msg_id: str | None, usage: dict | None
) -> list[bytes]:
    use = usage or _usage()
    start_usage = {**use, "output_tokens": min(1, use["output_tokens"])}
    events = [
        {
            "type": "message_start",
            "message": {
                "id": msg_id or _id("msg"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        }
    ]
    for index, (start, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": use["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return [sse(e) for e in events]


def _text_block(text: str) -> tuple[dict, list[dict]]:
    return {"type": "text", "text": ""}, [{"type": "text_delta", "text": text}]


def _chunks(s: str, n: int) -> list[str]:
    size = max(1, -(-len(s) // max(1, n)))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


def text_stream(
    text: str, *, model: str = DEFAULT_MODEL, msg_id: str | None = None, usage: dict | None = None
) -> list[bytes]:
    """The SSE events of a final answer: one text block, `stop_reason: end_turn`."""
    return _stream([_text_block(text)], "end_turn", model=model, msg_id=msg_id, usage=usage)


def tool_use_stream(
    *calls: tuple[str, dict, str],
    text: str | None = None,
    model: str = DEFAULT_MODEL,
    msg_id: str | None = None,
    usage: dict | None = None,
    pieces: int = 3,
) -> list[bytes]:
    """The SSE events of a tool round: an optional text block, then one tool_use block per
    `(name, input, tool_use_id)` (its input JSON in `pieces` input_json_delta events),
    `stop_reason: tool_use`."""
    blocks = [_text_block(text)] if text else []
    for name, input, tool_id in calls:
        blocks.append(
            (
                {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
                [{"type": "input_json_delta", "partial_json": p} for p in _chunks(json.dumps(input), pieces)],
            )
        )
    return _stream(blocks, "tool_use", model=model, msg_id=msg_id, usage=usage)


def bash_tool_use_stream(
    command: str, tool_id: str, *, description: str = "Run the command", text: str | None = None, **kwargs: Any
) -> list[bytes]:
    """A tool round calling Claude Code's Bash tool once on `command`."""
    return tool_use_stream(("Bash", {"command": command, "description": description}, tool_id), text=text, **kwargs)


def message_json(
    text: str, *, model: str = DEFAULT_MODEL, msg_id: str | None = None, usage: dict | None = None
) -> dict:
    """A non-streamed answer (`stream` false or absent): for side requests."""
    return {
        "id": msg_id or _id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage or _usage(),
    }


# ---------------------------------------------------------------- reading what Claude Code sent


def is_main_request(body: dict) -> bool:
    """A request of the conversation itself (Claude Code's tools, Bash among them: streamed, or its
    non-streamed fallback), not a side request (quota check, session title, summaries, …)."""
    return any(t.get("name") == "Bash" for t in body.get("tools") or [])


def is_quota_check(body: dict) -> bool:
    return body.get("max_tokens") == 1 and body.get("messages") == [{"role": "user", "content": "quota"}]


def tool_results(body: dict) -> list[dict]:
    """Every tool_result block in the request's messages, in order."""
    return [
        b
        for m in body.get("messages", [])
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def tool_uses(body: dict) -> list[dict]:
    """Every tool_use block in the request's assistant messages, in order."""
    return [
        b
        for m in body.get("messages", [])
        if m.get("role") == "assistant" and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]


def result_text(block: dict) -> str:
    """A tool_result's content as text (a string, or its text blocks joined)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def prompt_text(body: dict) -> str:
    """The user's prompt: the last text block of the first user message (after the reminders)."""
    first = next(m for m in body["messages"] if m["role"] == "user")
    content = first["content"]
    if isinstance(content, str):
        return content
    return [b["text"] for b in content if b.get("type") == "text"][-1]


# ---------------------------------------------------------------- running it


@dataclass
class Run:
    """One `claude -p --output-format stream-json` run: exit code, output, events, what the trap caught."""

    returncode: int
    stdout: str
    stderr: str
    events: list[dict] = field(default_factory=list)
    trapped: list[str] = field(default_factory=list)

    @property
    def result(self) -> dict:
        """The last event, `{"type": "result", "subtype": "success", "result": "<final text>", "usage": …}`."""
        [done] = [e for e in self.events if e.get("type") == "result"]
        return done

    @property
    def text(self) -> str:
        return self.result.get("result", "")

    def blocks(self, role: str, kind: str | None = None) -> list[dict]:
        """The content blocks of the `assistant` or `user` events, in order (of one kind if given)."""
        return [
            b
            for e in self.events
            if e.get("type") == role
            for b in (e["message"]["content"] if isinstance(e["message"]["content"], list) else [])
            if kind is None or b.get("type") == kind
        ]

    def tool_uses(self, name: str | None = None) -> list[dict]:
        return [b for b in self.blocks("assistant", "tool_use") if name is None or b["name"] == name]

    def tool_results(self) -> list[dict]:
        """What Claude Code's tools returned, as Claude Code sent it back (with `tool_use_id`)."""
        return self.blocks("user", "tool_result")

    def usage(self) -> dict:
        return self.result["usage"]


@dataclass
class ClaudeCode:
    binary: Path
    home: Path  # HOME; CLAUDE_CONFIG_DIR is home/.claude
    workdir: Path
    base_url: str  # ANTHROPIC_BASE_URL: the server root, no /v1
    api_key: str = API_KEY
    headers: dict[str, str] = field(default_factory=dict)  # ANTHROPIC_CUSTOM_HEADERS
    model: str | None = None  # --model; None: Claude Code's default (DEFAULT_MODEL)
    settings: dict = field(default_factory=lambda: dict(SETTINGS))  # CLAUDE_CONFIG_DIR/settings.json
    env: dict[str, str] = field(default_factory=dict)  # more environment, last word
    # the command line before Claude Code's own arguments (default: the binary): e.g. `offload-proxy wrap claude … --`
    prefix: list[str] = field(default_factory=list)

    @property
    def config_dir(self) -> Path:
        return self.home / ".claude"

    def run(self, prompt: str, *options: str, timeout: float = 120) -> Run:
        """`claude -p … <options> -- <prompt>`: a new session."""
        return self._exec([*options], prompt, timeout)

    def resume(self, prompt: str, *options: str, timeout: float = 120) -> Run:
        """`claude -p … --continue <options> -- <prompt>`: the next turn of the last session here."""
        return self._exec(["--continue", *options], prompt, timeout)

    def environment(self, trap_url: str) -> dict[str, str]:
        proxy_env = {name: trap_url for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")}
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "LANG": "C.UTF-8",
            "SHELL": shutil.which("bash") or "/bin/sh",
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": self.api_key,
            # off: metrics, event logging, feature flags (api.anthropic.com), Sentry, updates
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            # a failed request fails the run at once instead of being retried with backoff, and a
            # broken stream too instead of being asked again without streaming
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK": "1",
            # bypassPermissions refuses to run as root unless told it is in a sandbox (it is: offline)
            "IS_SANDBOX": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            **proxy_env,
            **{k.lower(): v for k, v in proxy_env.items()},
        }
        if self.headers:
            env["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return {**env, **self.env}

    def argv(self, options: list[str], prompt: str) -> list[str]:
        """The command line of a run, its settings written."""
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "settings.json").write_text(json.dumps(self.settings))
        return [
            *(self.prefix or [str(self.binary)]),
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "bypassPermissions",
            *(["--model", self.model] if self.model else []),
            *options,
            "--",
            prompt,
        ]

    def _exec(self, options: list[str], prompt: str, timeout: float) -> Run:
        argv = self.argv(options, prompt)
        with Trap() as trap:
            with open(os.devnull, "rb") as stdin:
                done = subprocess.run(
                    argv,
                    cwd=self.workdir,
                    env=self.environment(trap.url),
                    stdin=stdin,
                    check=False,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
            trapped = agent_connections(trap.seen)
        events = []
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return Run(done.returncode, done.stdout, done.stderr, events, trapped)
