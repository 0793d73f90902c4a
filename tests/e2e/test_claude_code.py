"""The real Claude Code CLI, unchanged, through the proxy (`ANTHROPIC_BASE_URL` at the proxy's root).

The fake model makes Claude Code run its Bash tool twice: `cat big.txt` (~100 KB, a needle line
in the middle), then `cat notes.txt` (~20 KB). Claude Code resends the whole history every
round, so the request after the second call carries the first output again, no longer in the
recent tail: the proxy forwards a marker with `ref=` in its place (and the second output, the
tail, verbatim). The fake model reloads that ref with `context_reload`; the proxy runs the
reload itself, asks again with the original text appended, and the fake answers with the
needle. Claude Code sees its two Bash calls and the answer, never the reload round: not in its
stream-json events, not in its transcript, not in the history it sends on its next turn
(`--continue`), where both outputs come back as the same markers, byte for byte. Thresholds come
as `X-Offload-*` lines of `ANTHROPIC_CUSTOM_HEADERS`, which never reach the upstream.

The second test lowers the trigger so that the history crosses it and a turn must wait for its
summary (`X-Offload-Hard-Max-Tokens`): the summary call goes to the fake's `/v1/messages` with
Claude Code's credential, and the run still finishes.

Claude Code is installed once with npm into .cache/npm-claude-code (tests/harness/claude_code.py);
without npm on PATH this module is skipped (CI=true: fails), and the run ends saying so.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from starlette.responses import StreamingResponse

from proxy.core.texts import tool_result_ref
from tests.harness.claude_code import (
    API_KEY,
    ClaudeCode,
    bash_tool_use_stream,
    install,
    is_main_request,
    result_text,
    text_stream,
    tool_results,
    tool_use_stream,
    tool_uses,
    usage,
)
from tests.harness.prerequisites import require
from tests.harness.servers import (
    SNAPSHOT,
    default_handler,
    is_summary_call,
    snapshot_answer,
    summary_shape,
)

NEEDLE = "checkpoint 7341: the orchid key opens the third drawer"
BIG = "\n".join(
    NEEDLE if i == 800 else f"row {i:05d} lorem ipsum dolor sit amet consectetur adipiscing {i * 7919 % 10007:05d}"
    for i in range(1600)
)
NOTES = "\n".join(f"note {i:04d}: the quick brown fox jumps over the lazy dog, again and again" for i in range(280))
HEADERS = {
    "X-Offload-Mode": "compact",
    "X-Offload-Max-Total-Tokens": "4000",
    "X-Offload-Max-Tool-Message-Tokens": "1000",
    "X-Offload-Max-Reload-Tokens": "60000",
    "X-Offload-Session": "claude-code-e2e",
}
PROMPT = "Read big.txt and notes.txt, then tell me what the checkpoint line says."
PROMPT2 = "Which refs do you see?"
FINAL = "FINAL: the checkpoint line says: " + NEEDLE
CAT_BIG, CAT_NOTES, RELOAD = "toolu_cat_big_1", "toolu_cat_notes_1", "toolu_reload_1"
INJECTED = ("context_reload", "context_search")


@pytest.fixture(scope="session")
def claude_binary():
    require(
        shutil.which("npm") is not None,
        "npm",
        "not on PATH: Claude Code (npm @anthropic-ai/claude-code) cannot be installed",
    )
    return install()  # an install that fails is a failure, not a skip


@pytest.fixture(scope="module")
def claude_proxy(make_proxy):
    # BIG (~100 KB) is forwarded whole while fresh: under the cap for a fresh result by any count
    # (the offline estimate makes it ~26,000 tokens, past the 25,000 default)
    with make_proxy(max_fresh_tool_message_tokens=60_000) as url:
        yield url


def sse(events: list[bytes]) -> StreamingResponse:
    return StreamingResponse(iter(events), media_type="text/event-stream")


def by_id(body: dict) -> dict[str, dict]:
    return {b["tool_use_id"]: b for b in tool_results(body)}


def user_texts(body: dict) -> list[str]:
    """The texts of the user messages (prompts, reminders), in order."""
    texts = []
    for m in body["messages"]:
        if m["role"] == "user":
            content = m["content"]
            texts += [content] if isinstance(content, str) else [b["text"] for b in content if b.get("type") == "text"]
    return texts


def reload_model(rec):
    """Run `cat big.txt`, then `cat notes.txt`; then reload big.txt's output by the ref its marker
    names; answer with the needle the reloaded text holds. On a later turn, list the refs seen."""
    body = rec.json()
    assert body.get("stream") is True
    results = by_id(body)
    if PROMPT2 in user_texts(body):  # the --continue turn
        refs = sorted(filter(None, (tool_result_ref(result_text(b)) for b in results.values())))
        return sse(text_stream(f"FINAL 2: still offloaded as {refs}.", usage=usage(7_000, 12, cache_read=6_000)))
    if RELOAD in results:
        reloaded = result_text(results[RELOAD])
        found = NEEDLE if NEEDLE in reloaded else "nothing"
        return sse(text_stream(f"FINAL: the checkpoint line says: {found}", usage=usage(40_000, 30, cache_read=9_000)))
    if CAT_NOTES in results:
        ref = tool_result_ref(result_text(results[CAT_BIG]))
        if ref is None:
            return sse(text_stream("FINAL: big.txt came back verbatim, nothing to reload."))
        return sse(tool_use_stream(("context_reload", {"ref": ref}, RELOAD), usage=usage(9_000, 25, cache_read=5_000)))
    if CAT_BIG in results:
        return sse(
            bash_tool_use_stream(
                "cat notes.txt", CAT_NOTES, description="Show notes.txt", usage=usage(30_000, 20, cache_read=4_000)
            )
        )
    return sse(
        bash_tool_use_stream(
            "cat big.txt",
            CAT_BIG,
            description="Show big.txt",
            text="Reading big.txt.",
            usage=usage(5_000, 15, cache_creation=4_000),
        )
    )


def model_handler(script):
    async def handler(request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec)
        if rec.method == "POST" and rec.path.endswith("/v1/messages") and is_main_request(rec.json()):
            return script(rec)
        return await default_handler(request, rec)

    return handler


def claude(binary: Path, proxy_url: str, tmp_path: Path, headers: dict) -> ClaudeCode:
    work = tmp_path / "work"
    work.mkdir()
    (work / "big.txt").write_text(BIG + "\n")
    (work / "notes.txt").write_text(NOTES + "\n")
    return ClaudeCode(binary, home=tmp_path / "home", workdir=work, base_url=proxy_url, headers=headers)


def transcripts(cc: ClaudeCode) -> str:
    """Everything Claude Code wrote under its config dir (the session transcripts among it)."""
    return "".join(p.read_text(errors="replace") for p in sorted(cc.config_dir.rglob("*")) if p.is_file())


def assert_headers_clean(upstream) -> None:
    for rec in upstream.requests:
        assert rec.headers.get("x-api-key") == API_KEY
        assert not any(k.startswith("x-offload-") for k in rec.headers), rec.headers


def test_claude_code_offload_and_hidden_reload(claude_binary, claude_proxy, upstream, tmp_path):
    assert len(BIG) > 95_000 and len(BIG) < 120_000 and len(NOTES) > 15_000
    upstream.handler = model_handler(reload_model)
    cc = claude(claude_binary, claude_proxy, tmp_path, HEADERS)
    run = cc.run(PROMPT)

    # Claude Code: finished, offline, its two Bash calls with their whole outputs, then the answer
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert run.trapped == []
    assert run.text == FINAL and run.result["is_error"] is False
    assert [(b["id"], b["input"]["command"]) for b in run.tool_uses()] == [
        (CAT_BIG, "cat big.txt"),
        (CAT_NOTES, "cat notes.txt"),
    ]
    outputs = {b["tool_use_id"]: result_text(b) for b in run.tool_results()}
    assert outputs == {CAT_BIG: BIG, CAT_NOTES: NOTES}
    # ... and never the reload round: no injected tool anywhere it shows or keeps
    assert CAT_BIG in transcripts(cc) and FINAL in transcripts(cc)  # the session transcript is there
    for name in INJECTED:
        assert name not in run.stdout and name not in run.stderr
        assert name not in transcripts(cc)
    assert "ref=" not in run.stdout and RELOAD not in run.stdout
    # its usage: every upstream round, the hidden one included (summed by the proxy)
    got = run.usage()
    assert (got["input_tokens"], got["output_tokens"]) == (5_000 + 30_000 + 9_000 + 40_000, 15 + 20 + 25 + 30)
    assert (got["cache_read_input_tokens"], got["cache_creation_input_tokens"]) == (4_000 + 5_000 + 9_000, 4_000)

    # the upstream: four rounds, the last one the proxy's own
    first, second, third, fourth = upstream.messages_requests()
    assert_headers_clean(upstream)
    bodies = [r.json() for r in (first, second, third, fourth)]
    claude_tools = [t["name"] for t in bodies[0]["tools"]]
    assert "Bash" in claude_tools and not set(INJECTED) & set(claude_tools)
    # round 2: big.txt's output is the recent tail, forwarded verbatim, nothing to reload yet
    assert result_text(by_id(bodies[1])[CAT_BIG]) == BIG
    assert [t["name"] for t in bodies[1]["tools"]] == claude_tools
    # round 3: big.txt's output is a marker with a ref, notes.txt's (the tail) verbatim; reload tools appended
    marker = result_text(by_id(bodies[2])[CAT_BIG])
    assert marker.startswith("[offloaded tool result: ") and len(marker) < 2_000, marker[:300]
    ref = tool_result_ref(marker)
    assert ref and NEEDLE not in third.body.decode() and "row 01000 " not in third.body.decode()
    assert result_text(by_id(bodies[2])[CAT_NOTES]) == NOTES
    assert [t["name"] for t in bodies[2]["tools"]] == [*claude_tools, *INJECTED]
    assert bodies[2]["messages"][0] == bodies[0]["messages"][0]  # the prompt, untouched
    # round 4: the proxy's reload round: round 3's body plus the context_reload call and its result
    assert bodies[3]["messages"][:-2] == bodies[2]["messages"]
    assistant, answer = bodies[3]["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert [(b["type"], b.get("name"), b.get("input")) for b in assistant["content"]] == [
        ("tool_use", "context_reload", {"ref": ref})
    ]
    assert answer["role"] == "user"
    [reloaded] = answer["content"]
    assert reloaded["type"] == "tool_result" and reloaded["tool_use_id"] == RELOAD
    assert NEEDLE in result_text(reloaded) and BIG in result_text(reloaded)

    # the next turn (--continue): Claude Code's history holds its Bash rounds and the answer, no
    # reload; the proxy forwards both outputs as markers, big.txt's byte for byte as before
    turn2 = cc.resume(PROMPT2)
    assert turn2.returncode == 0, (turn2.stdout[-3000:], turn2.stderr[-3000:])
    assert turn2.trapped == [] and turn2.tool_uses() == []
    for name in INJECTED:
        assert name not in turn2.stdout and name not in transcripts(cc)
    [fifth] = upstream.messages_requests()[4:]
    body = fifth.json()
    assert [b["id"] for b in tool_uses(body)] == [CAT_BIG, CAT_NOTES]
    assert [b["name"] for b in tool_uses(body)] == ["Bash", "Bash"]
    assert set(by_id(body)) == {CAT_BIG, CAT_NOTES}
    assert result_text(by_id(body)[CAT_BIG]) == marker
    notes_ref = tool_result_ref(result_text(by_id(body)[CAT_NOTES]))
    assert notes_ref and notes_ref != ref
    assert fifth.body.decode().count(NEEDLE) == 1  # in the answer Claude Code got, not as big.txt's output
    assert "row 01000 " not in fifth.body.decode() and "note 0100:" not in fifth.body.decode()
    final_turn = [m for m in body["messages"] if m["role"] == "assistant"][-1]
    assert [b.get("text") for b in final_turn["content"] if b["type"] == "text"] == [FINAL]
    assert turn2.text == f"FINAL 2: still offloaded as {sorted([ref, notes_ref])}."
    assert [t["name"] for t in body["tools"]] == [*claude_tools, *INJECTED]
    assert_headers_clean(upstream)


# ---------------------------------------------------------------- compression

PARTS = 5
COMPRESS = {
    "X-Offload-Mode": "compress",
    "X-Offload-Max-Total-Tokens": "1500",
    "X-Offload-Hard-Max-Tokens": "1",
    "X-Offload-Precompress-Ratio": "0",
    "X-Offload-Session": "claude-code-e2e-compress",
}


def part(k: int) -> str:
    """~3.5 KB (~1600 tokens); the mode is compress: only a summary shrinks the history."""
    return "\n".join(f"part{k} entry {i:03d}: {' '.join(f'w{(i * j + k) % 97}' for j in range(8))}" for i in range(70))


def part_id(k: int) -> str:
    return f"toolu_cat_part{k}_1"


def compress_model(rec):
    """`cat part1.txt`, …, `cat part5.txt` (the newest result, always in the recent tail, says
    which comes next), then an answer saying whether the history came summarised."""
    body = rec.json()
    assert body.get("stream") is True
    results = tool_results(body)
    done = max(
        (int(m[1]) for b in results if (m := re.fullmatch(r"toolu_cat_part(\d)_1", b["tool_use_id"]))), default=0
    )
    if done < PARTS:
        k = done + 1
        return sse(
            bash_tool_use_stream(
                f"cat part{k}.txt", part_id(k), description=f"Show part{k}.txt", usage=usage(1_000, 10)
            )
        )
    summarised = "[offloaded history: " in json.dumps(body) and SNAPSHOT in json.dumps(body)
    return sse(text_stream(f"FINAL: read {PARTS} parts, history summarised: {summarised}.", usage=usage(1_000, 10)))


def test_claude_code_history_compressed_inline(claude_binary, claude_proxy, upstream, tmp_path):
    upstream.handler = model_handler(compress_model)
    cc = claude(claude_binary, claude_proxy, tmp_path, COMPRESS)
    for k in range(1, PARTS + 1):
        (cc.workdir / f"part{k}.txt").write_text(part(k) + "\n")
    run = cc.run(f"Read part1.txt to part{PARTS}.txt one after the other, then report.")

    # Claude Code: finished, its five Bash calls with their whole outputs, the answer
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert run.trapped == []
    assert run.text == f"FINAL: read {PARTS} parts, history summarised: True."
    assert [b["input"]["command"] for b in run.tool_uses()] == [f"cat part{k}.txt" for k in range(1, PARTS + 1)]
    assert [result_text(b) for b in run.tool_results()] == [part(k) for k in range(1, PARTS + 1)]
    for name in INJECTED:
        assert name not in run.stdout and name not in transcripts(cc)
    assert "state_snapshot" not in run.stdout and "state_snapshot" not in transcripts(cc)

    # the summary calls: on the fake's /v1/messages, Claude Code's credential, the prefix shape
    calls = upstream.summary_requests()
    assert calls
    for call in calls:
        assert call.path == "/v1/messages" and summary_shape(call) == "prefix"
        assert call.headers["x-api-key"] == API_KEY and call.headers["anthropic-version"] == "2023-06-01"
        assert call.json()["model"] == upstream.messages_requests()[0].json()["model"]
        assert call.json().get("stream") in (None, False)
    # ... waited for: forwarded right after its summary call, the summary in the history
    rounds = upstream.messages_requests()
    assert len(rounds) == PARTS + 1
    first_call = upstream.requests.index(calls[0])
    nxt = upstream.requests[first_call + 1]
    assert nxt in rounds and "[offloaded history: " in nxt.body.decode() and SNAPSHOT in nxt.body.decode()
    assert "[offloaded history: " not in rounds[0].body.decode()
    final = rounds[-1].json()
    assert "part1 entry 000" not in rounds[-1].body.decode()  # the first output folded into the summary
    assert result_text(tool_results(final)[-1]) == part(PARTS)  # the recent tail verbatim
    used = {b["id"] for b in tool_uses(final)}
    assert all(b["tool_use_id"] in used for b in tool_results(final))  # no result without its call
    assert [t["name"] for t in final["tools"]][-2:] == list(INJECTED)
    # Claude Code's environment (a message of role system) kept verbatim, right after the summary
    environment = rounds[1].json()["messages"][1]
    assert environment["role"] == "system" and environment["content"].startswith("# Environment")
    assert all(r.json()["messages"][1] == environment for r in rounds[1:])
    # the task (Claude Code's first user message) stays, the summary joins its message after it
    task = rounds[0].json()["messages"][0]["content"]
    task = task if isinstance(task, list) else [{"type": "text", "text": task}]
    blocks = final["messages"][0]["content"]
    assert blocks[: len(task)] == task and blocks[len(task)]["text"].startswith("[offloaded history: ")
    # the summaries' usage in Claude Code's count
    got = run.usage()
    assert (got["input_tokens"], got["output_tokens"]) == (
        1_000 * len(rounds) + 300 * len(calls),
        10 * len(rounds) + 40 * len(calls),
    )
    assert_headers_clean(upstream)


# ---------------------------------------------------------------- Claude Code's own /compact

COMPACT_INSTRUCTION = "Your task is to create a detailed summary of the conversation so far"
COMPACT_SUMMARY = (
    "<analysis>read two files</analysis><summary>1. Primary Request: the checkpoint line of big.txt</summary>"
)


def test_claude_codes_own_compaction_gets_the_originals(claude_binary, claude_proxy, upstream, tmp_path):
    """The real Claude Code CLI's own `/compact` through the proxy: the model summarises the
    originals, not the proxy's previews of them.

    A first run reads big.txt (~100 KB, a needle line in its middle) and notes.txt; the proxy
    forwards big.txt's output as a marker with `ref=` once it is out of the recent tail (and the
    fake model reloads it, as in the first test). `--continue` with `/compact` then
    makes Claude Code send its compaction request: the whole conversation again, its instruction
    ("Your task is to create a detailed summary of the conversation so far…") in the last user
    message beside the last tool result. The history fits the model's window, so the proxy forwards
    it as Claude Code sent it: big.txt whole, needle included, no marker; the answer tells Claude
    Code which agent's compaction it recognised (`X-Offload-Client-Compaction`, not forwarded)."""
    turn = model_handler(reload_model)

    async def handler(request, rec):
        if rec.method == "POST" and COMPACT_INSTRUCTION in rec.body.decode(errors="replace"):
            return sse(text_stream(COMPACT_SUMMARY))
        return await turn(request, rec)

    upstream.handler = handler
    cc = claude(claude_binary, claude_proxy, tmp_path, HEADERS)
    first = cc.run(PROMPT)
    assert NEEDLE in first.text
    before = [json.dumps(rec.json()) for rec in upstream.messages_requests()]
    assert any("ref=" in body and NEEDLE not in body.split("ref=")[0] for body in before)  # big.txt went as a marker
    compacted = cc.resume("/compact")
    assert not compacted.result.get("is_error"), compacted.result
    asks = [rec for rec in upstream.messages_requests() if COMPACT_INSTRUCTION in rec.body.decode(errors="replace")]
    assert len(asks) == 1
    forwarded = asks[0].json()
    results = [
        b
        for m in forwarded["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    big = next(b for b in results if b["tool_use_id"] == "toolu_cat_big_1")
    assert big["content"] == BIG  # the original, as Claude Code sent it
    assert "ref=" not in json.dumps(forwarded["messages"])
    assert not any(k.startswith("x-offload-") for k in asks[0].headers)
