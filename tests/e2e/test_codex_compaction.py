"""The real Codex CLI compacting its own history through the proxy: the proxy never summarises
across Codex's compaction.

Codex 0.169 with a custom provider (not OpenAI's) compacts locally: once the usage it is told
crosses `model_auto_compact_token_limit`, it sends its history with a summarisation prompt as a
user message ("You are performing a CONTEXT CHECKPOINT COMPACTION…", a normal streamed
`POST /responses`), then goes on with a new history: its instructions, the environment context,
the user's messages and one user message holding the summary after Codex's SUMMARY_PREFIX
("Another language model started to solve this problem…"). It sends neither
`/responses/compact` nor `context_management` to such a provider (asserted below), so nothing
here goes through the proxy's emulation of them.

The fake model runs six shell steps (`seq`, 400 lines each: the proxy offloads every output),
reports usage above Codex's limit after step 3 (Codex compacts once), answers Codex's
summarisation turn (which the proxy forwards with the originals: it fits the model's window,
`proxy.core.compression`), finishes the steps (and a small `echo`), reloads the newest offloaded
output through the proxy and answers. The proxy compresses too (a low trigger; summaries inline, so what it forwards is
deterministic): after Codex's compaction its summaries fold only the work after Codex's
summary message, which stays verbatim and in place (`proxy.core.compaction.
client_summary_end`).
"""

from __future__ import annotations

import json
import re

import httpx2

from proxy.core.compaction import CLIENT_SUMMARY_PREFIXES
from proxy.core.texts import history_ref
from tests.e2e.test_codex_cli import codex_binary  # noqa: F401  (the session fixture installing Codex)
from tests.harness.codex import Codex
from tests.harness.responses import answer, function_call, input_items, message, usage
from tests.harness.servers import default_handler, is_responses_create, is_summary_call, snapshot_answer

STEPS = 6
LINES = 400
COMPACT_AT = 3  # the response calling this step reports usage above Codex's limit
CODEX_LIMIT = 6_000
CHECK = "echo checked"
COMPACT_PROMPT = "You are performing a CONTEXT CHECKPOINT COMPACTION."  # codex-rs/core/templates/compact/prompt.md
CODEX_PREFIX = CLIENT_SUMMARY_PREFIXES[0]
SETTINGS = {"max_total_tokens": 500, "max_tool_message_tokens": 300, "precompress_ratio": 0.0, "hard_max_tokens": 1}
API_KEY = "sk-codex-test"  # what tests/harness/codex.py gives Codex
TOOL_MARKER = re.compile(r"^\[offloaded tool result: \d+ tokens, ref=([A-Za-z0-9_-]{6,64})\]")
HISTORY_MARKER = re.compile(
    r"\[offloaded history: \d+ earlier messages \(\d+ tokens\) summarised, "
    r"ref=([A-Za-z0-9_-]{6,64})\."
)


def text_of(item: dict) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def is_user(item: dict, prefix: str) -> bool:
    return item.get("type") == "message" and item.get("role") == "user" and text_of(item).startswith(prefix)


def done_steps(items: list[dict]) -> int:
    """The newest step the history shows: a step's call, or a summary (Codex's or the proxy's)
    saying how far it got."""
    blob = json.dumps(items)
    return max(
        [int(k) for k in re.findall(r"steps-done=(\d+)", blob)]
        + [int(k) for k in re.findall(r"call_step_(\d+)", blob)],
        default=0,
    )


def item_text(item: dict) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def last_step_output(reloaded: str) -> str:
    """The last step's output in what a reload returned: the output itself (a compacted tool
    result), or its item among the JSON lines of a summarised history."""
    for line in reloaded.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            if item.get("type") == "function_call_output" and item.get("call_id") == f"call_step_{STEPS}":
                return item["output"]
    return reloaded


def step_command(k: int) -> str:
    return f"seq {k * 100_000} {k * 100_000 + LINES - 1}"


class Model:
    """The fake model: six steps, Codex's summarisation turn, a reload, the answer."""

    def __init__(self) -> None:
        self.reloaded_from: str | None = None  # the call whose offloaded output it reloaded
        self.reloaded_ref: str | None = None  # ...by this ref: its marker's, or that of the summary folding it

    def __call__(self, rec):
        items = input_items(rec)
        last = items[-1]
        if is_user(last, COMPACT_PROMPT):
            return answer(rec, message(f"Steps so far: steps-done={done_steps(items)}."), usage=usage(900, 40))
        if last.get("type") == "function_call_output" and last["call_id"] == "call_reload":
            numbered = re.findall(r"^\d{6}$", last_step_output(last["output"]), re.M)
            return answer(
                rec,
                message(f"FINAL: {STEPS} steps; reloaded {len(numbered)} lines from {numbered[0]}."),
                usage=usage(2_000, 20),
            )
        done = done_steps(items)
        if done >= STEPS and last.get("call_id") != "call_check":
            # one small command more: the proxy keeps the newest output as it is, the last step's goes offloaded
            return answer(
                rec,
                function_call("exec_command", {"cmd": CHECK, "login": False}, call_id="call_check"),
                usage=usage(2_000, 20),
            )
        if done >= STEPS:
            marked = [
                (i["call_id"], m[1])
                for i in items
                if i.get("type") == "function_call_output" and (m := TOOL_MARKER.match(i["output"]))
            ]
            if marked and marked[-1][0] == f"call_step_{STEPS}":
                call_id, ref = marked[-1]
            else:  # the proxy's summary folded the last step (where it cuts depends on the token counter)
                call_id, ref = f"call_step_{STEPS}", [r for i in items if (r := history_ref(item_text(i)))][-1]
            self.reloaded_from, self.reloaded_ref = call_id, ref
            return answer(
                rec, function_call("context_reload", {"ref": ref}, call_id="call_reload"), usage=usage(2_000, 20)
            )
        k = done + 1
        return answer(
            rec,
            function_call("exec_command", {"cmd": step_command(k), "login": False}, call_id=f"call_step_{k}"),
            usage=usage(CODEX_LIMIT + 1_000 if k == COMPACT_AT else 1_000, 20),
        )


def stored(proxy: str, ref: str) -> dict:
    got = httpx2.get(f"{proxy}/v1/offload/{ref}", headers={"authorization": f"Bearer {API_KEY}"}, timeout=20)
    assert got.status_code == 200, got.text
    return got.json()


def test_codex_compacts_and_the_proxy_never_summarises_across_it(
    codex_binary,
    make_proxy,
    upstream,  # noqa: F811
    tmp_path,
):
    model = Model()

    async def handler(request, rec):
        if is_summary_call(rec):  # the proxy's own summary: say how far the part it folds got
            return snapshot_answer(rec, f"<state_snapshot>steps-done={done_steps(input_items(rec))}</state_snapshot>")
        if is_responses_create(rec):
            return model(rec)
        return await default_handler(request, rec)

    upstream.handler = handler
    with make_proxy(**SETTINGS) as proxy:
        codex = Codex(codex_binary, home=tmp_path / "codex-home", workdir=tmp_path / "work", base_url=f"{proxy}/v1")
        run = codex.run(
            f"Run the {STEPS} steps.",
            "-c",
            "tool_output_token_limit=200000",
            "-c",
            f"model_auto_compact_token_limit={CODEX_LIMIT}",
            timeout=60,
        )

        # Codex finished, offline, every step run once, with the model's answer
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.trapped == []
        shells = run.items("command_execution")
        assert [s["exit_code"] for s in shells] == [0] * (STEPS + 1)
        assert [c in s["command"] for c, s in zip([*map(step_command, range(1, STEPS + 1)), CHECK], shells)] == [
            True
        ] * (STEPS + 1)
        assert model.reloaded_from == f"call_step_{STEPS}"  # the newest output the proxy had offloaded
        assert [m["text"] for m in run.items("agent_message")] == [
            f"FINAL: {STEPS} steps; reloaded {LINES} lines from {STEPS}00000."
        ]
        assert "context_reload" not in run.stdout

        # Codex compacted once, locally: its summarisation turn went upstream as a normal request
        everything = upstream.requests
        assert not [r.path for r in everything if not r.path.endswith("/v1/responses")]  # no /responses/compact
        assert not [r for r in everything if "context_management" in r.json()]
        requests = upstream.responses_requests()
        compactions = [n for n, r in enumerate(requests) if is_user(input_items(r)[-1], COMPACT_PROMPT)]
        assert len(compactions) == 1
        [at] = compactions
        assert done_steps(input_items(requests[at])) == COMPACT_AT
        # ... and got the originals: the history fits the model's window (proxy.core.compression)
        asked = input_items(requests[at])
        whole = {
            i["call_id"]
            for i in asked
            if i.get("type") == "function_call_output"
            and "\n".join(str(int(i["call_id"][len("call_step_") :]) * 100_000 + n) for n in range(LINES))
            in i["output"]
        }
        assert whole == {f"call_step_{k}" for k in range(1, COMPACT_AT + 1)}
        shown = [text_of(i) or (i["output"] if isinstance(i.get("output"), str) else "") for i in asked]
        assert not any(TOOL_MARKER.match(text) or HISTORY_MARKER.search(text) for text in shown)

        # after it, every request keeps Codex's summary and what precedes it verbatim, in place
        after = requests[at + 1 :]
        assert len(after) >= STEPS - COMPACT_AT + 2
        kept = None
        for rec in after:
            items = input_items(rec)
            [boundary] = [n for n, i in enumerate(items) if is_user(i, CODEX_PREFIX)]
            assert f"steps-done={COMPACT_AT}" in text_of(items[boundary])
            kept = kept or items[: boundary + 1]
            assert items[: boundary + 1] == kept
            assert not any(HISTORY_MARKER.search(text_of(i)) for i in kept)
            assert not [i for i in kept if i.get("type") != "message"]  # Codex dropped steps 1-3 itself
        # ... and the proxy did summarise after it: only what came after Codex's summary
        summarised = {ref for rec in after for i in input_items(rec) for ref in HISTORY_MARKER.findall(text_of(i))}
        assert summarised, "the proxy never summarised after Codex's compaction: the test proves nothing"
        for ref in summarised:
            originals = [json.loads(line) for line in stored(proxy, ref)["content"].splitlines()]
            assert originals and not [i for i in originals if i.get("type") == "message"]
            calls = {i["call_id"] for i in originals}
            assert calls <= {f"call_step_{k}" for k in range(COMPACT_AT + 1, STEPS + 1)}, calls
        for rec in upstream.summary_requests():
            items = input_items(rec)
            if any(is_user(i, CODEX_PREFIX) for i in items):  # a summary made after Codex's compaction
                assert items[: len(kept)] == kept  # folds nothing of it: it is the call's untouched head

        # the proxy offloaded every step's output, reloadable byte for byte (from its marker's ref or
        # from the originals of the summary that folded it), and reloaded one for the model
        outputs: dict[str, list[str]] = {}
        offloaded_last = None
        for ref in {ref for rec in requests for i in input_items(rec) for ref in HISTORY_MARKER.findall(text_of(i))}:
            for item in map(json.loads, stored(proxy, ref)["content"].splitlines()):
                if item.get("type") == "function_call_output":
                    outputs.setdefault(item["call_id"], []).append(item["output"])
        for rec in requests:
            for item in input_items(rec):
                if item.get("type") == "function_call_output" and (m := TOOL_MARKER.match(item["output"])):
                    outputs.setdefault(item["call_id"], []).append(stored(proxy, m[1])["content"])
                    if item["call_id"] == f"call_step_{STEPS}":
                        offloaded_last = m[1]
        for k in range(1, STEPS + 1):  # (an output last seen in Codex's compaction request went whole)
            seq = "\n".join(str(k * 100_000 + n) for n in range(LINES))
            assert outputs.get(f"call_step_{k}") or f"call_step_{k}" in whole, k
            assert all(seq in text for text in outputs.get(f"call_step_{k}", [])), k
        reload_round = [r for r in requests if input_items(r)[-1].get("call_id") == "call_reload"]
        assert len(reload_round) == 1
        reload_call, reload_output = input_items(reload_round[0])[-2:]
        # the newest marker of the last step's output, or (once a summary folded it: where the proxy
        # cuts depends on its token counter, tiktoken or the estimate) that summary's ref
        assert json.loads(reload_call["arguments"]) == {"ref": model.reloaded_ref}
        assert model.reloaded_ref == offloaded_last or model.reloaded_ref in summarised
        assert "\n".join(str(STEPS * 100_000 + n) for n in range(LINES)) in last_step_output(reload_output["output"])
