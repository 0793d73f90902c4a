"""proxy.core.tokens: token counting, images as providers bill them, what a request sends beside
its history."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from proxy.core import tokens
from proxy.core.tokens import (
    FALLBACK_ANTHROPIC,
    FALLBACK_OPENAI,
    EstimateEncoder,
    ImageInfo,
    TokenCounter,
    anthropic_tokens,
    counter_for_model,
    encoding_name_for_model,
    openai_tokens,
    read_header,
)
from tests.harness.screens import b64, data_url, png, screenshot
from tests.harness.screens import screenshot as shot

# ==================== tokens
# Token counting: encodings by model, caching, offline fallback.


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


# ==================== images
# Image sizes from headers only, and the providers' billing formulas.


def _jpeg(width: int, height: int, exif: int = 0) -> bytes:
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + b"E" * exif if exif else b""
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return b"\xff\xd8" + b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + app1 + sof + b"\xff\xd9"


def test_png_gif_webp_and_jpeg_headers_give_format_and_size():
    assert read_header(b64(screenshot(0))) == ImageInfo("png", 1280, 800)
    assert read_header(b64(b"GIF89a" + struct.pack("<HH", 640, 480) + b"\x00" * 20)) == ImageInfo("gif", 640, 480)
    vp8 = b"RIFF\x00\x00\x00\x00WEBPVP8 " + b"\x00" * 4 + b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", 800, 600)
    assert read_header(b64(vp8 + b"\x00" * 10)) == ImageInfo("webp", 800, 600)
    bits = (1023) | (767 << 14)
    vp8l = b"RIFF\x00\x00\x00\x00WEBPVP8L" + b"\x00" * 4 + b"\x2f" + bits.to_bytes(4, "little")
    assert read_header(b64(vp8l + b"\x00" * 10)) == ImageInfo("webp", 1024, 768)
    vp8x = b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x00" * 8 + (1919).to_bytes(3, "little") + (1079).to_bytes(3, "little")
    assert read_header(b64(vp8x)) == ImageInfo("webp", 1920, 1080)
    assert read_header(b64(_jpeg(1280, 800))) == ImageInfo("jpeg", 1280, 800)


def test_a_jpeg_frame_header_after_a_large_exif_block_is_found():
    assert read_header(b64(_jpeg(1024, 768, exif=60_000))) == ImageInfo("jpeg", 1024, 768)


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "!!!!not base64",
        b64(b"\x89PNG\r\n\x1a\n"),
        b64(b"hello world, no image"),
        b64(png(0, 0, [])),
        b64(b"\xff\xd8\xff\xe0"),
    ],
)
def test_what_is_not_a_readable_image_has_no_header(payload):
    assert read_header(payload) is None


def test_a_truncated_image_still_has_its_header():
    whole = screenshot(3)
    assert read_header(b64(whole[:100])) == ImageInfo("png", 1280, 800)


def test_openai_billing():
    assert openai_tokens(ImageInfo("png", 1280, 800)) == 1105  # 768 short side → 3×2 tiles
    assert openai_tokens(ImageInfo("png", 1280, 800), "low") == 85
    assert openai_tokens(ImageInfo("png", 512, 512)) == 255
    assert openai_tokens(ImageInfo("png", 4096, 8192)) == 85 + 170 * 2 * 3  # 2048 fit, then 768×1536
    assert openai_tokens(None) == tokens.FALLBACK_OPENAI == 765


def test_anthropic_billing():
    assert anthropic_tokens(ImageInfo("png", 1280, 800)) == 1366
    assert anthropic_tokens(ImageInfo("png", 200, 200)) == 54
    big = anthropic_tokens(ImageInfo("png", 4000, 3000))
    assert 1500 <= big <= 1540  # scaled to 1.15 megapixels
    assert anthropic_tokens(None) == tokens.FALLBACK_ANTHROPIC == 1399


def test_split_data_url():
    assert tokens.split_data_url("data:image/PNG;base64,QUJD") == ("image/png", "QUJD")
    assert tokens.split_data_url("data:image/png,QUJD") is None
    assert tokens.split_data_url("https://example.com/a.png") is None


def test_only_the_head_of_a_large_payload_is_decoded(monkeypatch):
    seen: list[int] = []
    real = tokens.binascii.a2b_base64
    monkeypatch.setattr(tokens.binascii, "a2b_base64", lambda data, **kw: seen.append(len(data)) or real(data, **kw))
    payload = b64(screenshot(4)) + base64.b64encode(b"\x00" * 3_000_000).decode()
    assert read_header(payload) == ImageInfo("png", 1280, 800)
    assert max(seen) <= tokens.HEAD_CHARS


# ==================== outside history
# What a request sends beside its history (keep-alive weighs a session's prefix by it, the
# clearing edits count it as fixed): the tools and a system prompt kept outside the history.


def test_tools_and_a_system_prompt_outside_the_history_are_counted():
    counter = counter_for_model("gpt-4o")
    system = "You are a careful coding agent. " * 500
    tools = [
        {"name": f"tool_{i}", "description": "does a thing " * 20, "input_schema": {"type": "object"}}
        for i in range(10)
    ]
    messages = {"system": system, "tools": tools, "messages": []}
    assert counter.outside_history(messages) == counter.text(system) + counter.tools(tools) > 3000
    assert counter.outside_history({"system": [{"type": "text", "text": system}]}) == counter.text(system)
    assert counter.outside_history({"instructions": system, "input": "hi"}) == counter.text(system)
    chat = {"messages": [{"role": "system", "content": system}]}
    assert counter.outside_history(chat) == 0  # its system message is in the history, counted there


# ---------------------------------------------------------------- an earlier turn's counts


def _history(n: int, *, tag: str = "") -> list[dict]:
    """A long history, parsed anew each call (new objects, equal content)."""
    return json.loads(
        json.dumps(
            [
                {"role": "user" if i % 2 == 0 else "tool", "content": f"{tag}message {i} " + "word " * (i % 7)}
                for i in range(n)
            ]
        )
    )


@pytest.fixture
def recent(monkeypatch):
    """A memo of the earlier turns' counts of this test's own, and the messages counted anew."""
    monkeypatch.setattr(tokens, "_recent", tokens._RecentCounts(tokens.RECENT_HISTORIES, tokens.RECENT_BYTES))
    counted: list[object] = []
    real = TokenCounter._count_message

    def counting(self, message):
        counted.append(message)
        return real(self, message)

    monkeypatch.setattr(TokenCounter, "_count_message", counting)
    return counted


def test_a_turn_takes_the_counts_of_the_prefix_an_earlier_turn_counted(recent):
    base = counter_for_model("gpt-4o")
    first = base.for_request()
    turn1 = _history(100)
    first.recall(turn1, key="tenant-a")
    total1 = first.messages(turn1)
    first.remember(turn1, key="tenant-a")
    assert len(recent) == 100

    recent.clear()
    turn2 = _history(103)  # the same 100 messages, parsed again, and three new ones
    second = base.for_request()
    second.recall(turn2, key="tenant-a")
    total2 = second.messages(turn2)
    assert recent == turn2[100:]  # only the new ones were counted
    recent.clear()
    assert total2 == base.for_request().messages(turn2) and total2 > total1  # the same count as counted whole


def test_an_earlier_turns_counts_are_its_tenants_and_its_encodings_alone(recent):
    base = counter_for_model("gpt-4o")
    first = base.for_request()
    first.messages(turn1 := _history(100))
    first.remember(turn1, key="tenant-a")
    for key, counter in (("tenant-b", base), ("tenant-a", counter_for_model("gpt-4"))):  # another tenant; cl100k
        recent.clear()
        other = counter.for_request()
        other.recall(turn2 := _history(101), key=key)
        other.messages(turn2)
        assert len(recent) == 101, key  # counted whole


def test_a_history_changed_before_its_end_is_counted_whole(recent):
    base = counter_for_model("gpt-4o")
    first = base.for_request()
    first.messages(turn1 := _history(100))
    first.remember(turn1, key="t")
    edited = _history(101)
    edited[50]["content"] = "edited by the client"
    recent.clear()
    second = base.for_request()
    second.recall(edited, key="t")
    total = second.messages(edited)
    assert len(recent) == 101  # counted whole
    assert total == base.for_request().messages(edited)


def test_short_histories_are_not_kept_and_the_kept_are_bounded(recent, monkeypatch):
    base = counter_for_model("gpt-4o")
    short = base.for_request()
    short.messages(few := _history(tokens.RECENT_MIN_ITEMS - 1))
    short.remember(few, key="t")
    assert tokens._recent._entries == []
    for k in range(tokens.RECENT_HISTORIES + 5):  # as many conversations, each of its own
        counter = base.for_request()
        counter.messages(turn := _history(70, tag=f"c{k} "))
        counter.remember(turn, key="t")
    assert len(tokens._recent._entries) == tokens.RECENT_HISTORIES
    held = tokens._recent._entries[-1].held
    monkeypatch.setattr(tokens._recent, "held", held * 5 // 2)  # room for two: the least recently kept go
    counter = base.for_request()
    counter.messages(turn := _history(70, tag="last "))
    counter.remember(turn, key="t")
    assert len(tokens._recent._entries) == 2 and tokens._recent._entries[-1].items == turn


def test_the_next_turn_replaces_its_conversations_entry(recent):
    base = counter_for_model("gpt-4o")
    for n in (100, 101, 102):
        counter = base.for_request()
        counter.recall(turn := _history(n), key="t")
        counter.messages(turn)
        counter.remember(turn, key="t")
    [entry] = tokens._recent._entries
    assert len(entry.items) == 102 and len(entry.counts) == 102


def test_a_history_not_wholly_counted_is_not_kept(recent):
    counter = counter_for_model("gpt-4o").for_request()
    turn = _history(100)
    counter.messages(turn[:99])
    counter.remember(turn, key="t")
    assert tokens._recent._entries == []


def test_an_earlier_turns_objects_are_known_as_the_prefix_of_a_history_recalled_from_it(recent):
    base = counter_for_model("gpt-4o")
    first = base.for_request()
    first.messages(turn1 := _history(100))
    first.remember(turn1, key="t")
    second = base.for_request()
    second.recall(turn2 := _history(102), key="t")
    assert second.earlier_prefix(turn1[:60], turn2) and second.earlier_prefix(turn1, turn2)
    assert not second.earlier_prefix(_history(60), turn2)  # equal, but not the earlier turn's objects
    assert not second.earlier_prefix(turn1, list(turn2))  # another list than the history recalled
    assert not second.earlier_prefix(turn2[:10], turn2)  # this turn's own objects: not what was compared
    assert not base.for_request().earlier_prefix(turn1, turn2)  # nothing recalled
