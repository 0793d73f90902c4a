"""Token counting: encodings by model, caching, offline fallback."""

from __future__ import annotations

import json

import pytest

from proxy.core import tokens
from proxy.core.images import FALLBACK_ANTHROPIC, FALLBACK_OPENAI
from proxy.core.tokens import EstimateEncoder, TokenCounter, counter_for_model, encoding_name_for_model
from tests.harness.screens import b64, data_url
from tests.harness.screens import screenshot as shot


def test_encoding_by_model_family():
    for model in ("gpt-4o-mini", "gpt-4.1", "o3-mini", "gpt-5", "some-unknown-model", None):
        assert encoding_name_for_model(model) == "o200k_base"
    for model in ("gpt-4", "gpt-4-turbo", "gpt-3.5-turbo"):
        assert encoding_name_for_model(model) == "cl100k_base"


def test_counts_messages_tool_calls_and_parts():
    c = counter_for_model("gpt-4o")
    plain = c.message({"role": "user", "content": "hello world"})
    assert plain > c.text("hello world")
    with_call = c.message(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls -la /tmp"}'}}
            ],
        }
    )
    assert with_call > 10
    parts = c.message(
        {
            "role": "user",
            "content": [{"type": "text", "text": "hello world"}, {"type": "image_url", "image_url": {"url": "x"}}],
        }
    )
    assert parts == plain + FALLBACK_OPENAI  # a URL is not fetched: the fallback
    assert c.tools([{"type": "function", "function": {"name": "f", "parameters": {}}}]) > 0


def test_repeated_text_is_served_from_the_cache():
    c = counter_for_model("gpt-4o")
    text = "unique text for the cache test " * 100
    c.text(text)
    hits = tokens._cache.hits
    assert c.text(text) == c.text(text)
    assert tokens._cache.hits == hits + 2


def test_unloadable_encoding_falls_back_to_an_estimate(monkeypatch):
    tokens.load_encoder.cache_clear()
    try:
        counter = TokenCounter("no_such_encoding_base")
        assert isinstance(counter.encoder, EstimateEncoder)
        assert counter.text("x" * 400) == 100
    finally:
        tokens.load_encoder.cache_clear()


# ---------------------------------------------------------------- Responses API input items


def test_a_responses_message_counts_as_the_chat_message_with_the_same_text():
    c = counter_for_model("gpt-4o")
    chat = c.message({"role": "user", "content": "list the files"})
    assert (
        c.message({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]})
        == chat
    )
    assert c.message({"role": "user", "content": "list the files"}) == chat  # an EasyInputMessage: no type
    assert c.message(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "list the files", "annotations": []}],
        }
    ) == c.message({"role": "assistant", "content": "list the files"})
    image = {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "data:…"}]}
    assert c.message(image) == tokens.MESSAGE_OVERHEAD + c.text("user") + FALLBACK_OPENAI  # unreadable


def test_calls_and_results_cost_what_they_cost_in_a_chat_message():
    c = counter_for_model("gpt-4o")
    args = '{"cmd": "ls -la /tmp"}'
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "bash",
        "arguments": args,
        "id": "fc_1",
        "status": "completed",
    }
    assert c.message(call) == 3 + c.text("bash") + c.text(args)  # ids and status are not billed as text
    chat_call = c.message(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": args}}],
        }
    )
    assert chat_call == c.message(call) + tokens.MESSAGE_OVERHEAD + c.text("assistant")
    custom = {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch"}
    assert c.message(custom) == 3 + c.text("apply_patch") + c.text("*** Begin Patch")

    output = "total 0\n" * 50
    result = {"type": "function_call_output", "call_id": "call_1", "output": output}
    assert c.message(result) == 3 + c.text(output)
    assert c.message({"role": "tool", "tool_call_id": "call_1", "content": output}) == c.message(result) + c.text(
        "tool"
    )
    parts = {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [{"type": "input_text", "text": output}, {"type": "input_image", "image_url": "x"}],
    }
    assert c.message(parts) == 3 + c.text(output) + FALLBACK_OPENAI
    for kind in ("custom_tool_call_output", "local_shell_call_output", "apply_patch_call_output"):
        assert c.message({"type": kind, "call_id": "c", "output": output}) == 3 + c.text(output)
    screenshot = {
        "type": "computer_call_output",
        "call_id": "c",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "A" * 100_000},
    }
    assert c.message(screenshot) == 3 + FALLBACK_OPENAI
    real = {**screenshot, "output": {"type": "computer_screenshot", "image_url": data_url(shot(1))}}
    assert c.message(real) == 3 + 1105


def test_reasoning_counts_its_summary_and_estimates_the_encrypted_content():
    c = counter_for_model("gpt-4o")
    summary = "Looking at the failing test first."
    encrypted = "gAAAAABo" + "x" * 40_000
    item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": encrypted,
    }
    assert c.message(item) == 3 + c.text(summary) + len(encrypted) // 4
    assert c.message({"type": "reasoning", "summary": []}) == 3


def test_encrypted_content_is_not_tokenised(monkeypatch):
    c = TokenCounter("o200k_base")
    seen: list[int] = []
    encode = c.encoder.encode_ordinary
    monkeypatch.setattr(
        c, "encoder", type("Spy", (), {"encode_ordinary": lambda _, t: seen.append(len(t)) or encode(t)})()
    )
    c.message({"type": "reasoning", "summary": [], "encrypted_content": "Z" * 1_000_000})
    assert all(n < 1000 for n in seen)


def test_unknown_items_count_as_their_json():
    import json

    c = counter_for_model("gpt-4o")
    for item in (
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "x"}},
        {"type": "item_reference", "id": "msg_1"},
        {"type": 7},
    ):
        assert c.message(item) == c.text(json.dumps(item, ensure_ascii=False))


def test_a_chat_message_with_a_type_key_is_still_a_chat_message():
    c = counter_for_model("gpt-4o")
    plain = {"role": "tool", "tool_call_id": "1", "content": "x" * 100}
    assert c.message({**plain, "type": "function_call_output"}) == c.message(plain)


def test_anthropic_blocks_count_what_they_carry():
    c = counter_for_model("claude-sonnet-4-5")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 400_000}}
    assert c.content([image]) == FALLBACK_ANTHROPIC  # not its 400 KB of base64
    real = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(shot(1))}}
    assert c.content([real]) == 1366
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "hello world"}, image],
    }
    assert c.content([result]) == 3 + c.text("hello world") + FALLBACK_ANTHROPIC
    assert c.content([{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]) == 3 + c.text("ok")
    call = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}
    assert c.content([call]) == 3 + c.text("bash") + c.text('{"cmd": "ls"}')
    thinking = {"type": "thinking", "thinking": "Let me see.", "signature": "S" * 4000}
    assert c.content([thinking]) == c.text("Let me see.")
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "B" * 8000}}
    assert c.content([pdf]) == 2000
    plain = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "some text"}}
    assert c.content([plain]) == c.text("some text")
    unknown = {"type": "mystery", "x": 1}
    assert c.content([unknown]) == c.text(json.dumps(unknown))


def test_images_are_billed_from_their_header_and_base64_is_never_tokenised(monkeypatch):
    c = TokenCounter("o200k_base")
    seen: list[int] = []
    encode = c.encoder.encode_ordinary
    monkeypatch.setattr(
        c, "encoder", type("Spy", (), {"encode_ordinary": lambda _, t: seen.append(len(t)) or encode(t)})()
    )
    url = data_url(shot(2))
    chat = [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        {"type": "input_image", "image_url": url, "detail": "high"},
        {"type": "input_image", "file_id": "file-1"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]
    assert [c.content([p]) for p in chat] == [1105, 85, 1105, FALLBACK_OPENAI, FALLBACK_OPENAI]
    docs = [
        {"type": "file", "file": {"file_data": "data:application/pdf;base64," + "A" * 400_000}},
        {"type": "input_file", "file_data": "data:application/pdf;base64," + "A" * 400_000},
        {"type": "input_audio", "input_audio": {"data": "A" * 400_000, "format": "wav"}},
    ]
    assert all(100_000 <= c.content([p]) <= 100_010 for p in docs)
    assert all(n < 1000 for n in seen)


@pytest.mark.parametrize("run", ["a" * 30_000, "ab" * 15_000, "x1/" * 10_000])
def test_a_long_run_without_whitespace_is_counted_in_slices_close_to_whole(run):
    """BPE time grows faster than a piece's length: a long run is counted in LONG_RUN slices."""
    counter = tokens.counter_for_encoding("o200k_base")  # the estimate without the encodings: the same holds
    text = f"before {run} after"
    whole = len(counter.encoder.encode_ordinary(text))
    sliced = counter._sliced(text)
    assert tokens._LONG_RUN.search(text) is not None
    assert abs(sliced - whole) <= max(2, whole // 100)
    assert counter.text(text) == sliced


def test_a_long_text_is_counted_by_pieces_cut_after_line_breaks():
    """Past COUNT_PIECE characters a text is counted a piece at a time (each tiktoken call, and
    each regex search, holds the GIL only for its piece); cut after line breaks, the count is the
    whole text's."""
    from proxy.core import tokens

    text = "".join(f"line {i}: status ok, took {i % 97} ms\n" for i in range(40_000))
    pieces = list(tokens._pieces(text))
    assert "".join(pieces) == text and len(pieces) > 4
    assert all(len(p) <= tokens.COUNT_PIECE and p.endswith("\n") for p in pieces[:-1])
    counter = tokens.counter_for_model("gpt-4o")
    # tiktoken's pieces never span a line break, so its sum is exact; the offline estimate
    # (bytes / 4, rounded up) may round up once per piece
    slack = 0 if counter.encoder.name != "estimate" else len(pieces)
    assert 0 <= counter.text(text) - len(counter.encoder.encode_ordinary(text)) <= slack
    no_breaks = "word " * 200_000  # no line break: cut where the piece ends
    assert all(len(p) <= tokens.COUNT_PIECE for p in tokens._pieces(no_breaks))
    assert (
        abs(counter.text(no_breaks) - len(counter.encoder.encode_ordinary(no_breaks)))
        <= len(no_breaks) // tokens.COUNT_PIECE + 1
    )
