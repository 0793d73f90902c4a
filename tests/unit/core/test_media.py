"""proxy.core.media: images, documents and audio offloaded by content hash, their refs remembered."""

from __future__ import annotations

import json
import struct

from proxy.core import texts
from proxy.core.compaction import plan_compaction
from proxy.core.media import RefCache, plan_media, without_media
from proxy.core.settings import OffloadSettings
from proxy.core.texts import make_ref
from proxy.core.tokens import NOTE_KEY, ImageInfo, counter_for_model, data_url_header, read_header, split_data_url
from proxy.formats.chat import VIEW as CHAT
from proxy.formats.messages._items import MessagesView
from proxy.formats.responses import ResponsesView
from proxy.formats.responses._items import PLACEHOLDER_PNG
from proxy.formats.responses._request import with_history
from tests.harness.screens import b64, data_url, screenshot

# ==================== media
# Images and documents leave the context by content hash, in all three formats.

COUNTER = counter_for_model("gpt-4o")
# One image at a time: these tests are about what an offloaded image becomes; the default
# batch (chunks, for the prompt cache) has a test of its own below.
SETTINGS = OffloadSettings(image_batch=1, max_tool_message_tokens=2000)  # a 4,000-token document is large
RESPONSES = ResponsesView(("context_reload", "context_search"))
MESSAGES = MessagesView(("context_reload", "context_search"))
SHOTS = [screenshot(step) for step in range(6)]


def _chat(urls: list[str]) -> list[dict]:
    items: list[dict] = [{"role": "system", "content": "You drive a browser."}]
    for step, url in enumerate(urls):
        items.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": f"step {step}"}, {"type": "image_url", "image_url": {"url": url}}],
            }
        )
        items.append({"role": "assistant", "content": f"clicked {step}"})
    return items


def test_chat_images_before_the_most_recent_three_become_markers():
    items = _chat([data_url(s) for s in SHOTS])
    plan = plan_compaction(items, CHAT, SETTINGS, counter=COUNTER, namespace="ns")
    parts = [m["content"][1] for m in plan.items if m["role"] == "user"]
    assert [p["type"] for p in parts] == ["text"] * 3 + ["image_url"] * 3
    assert parts[3:] == [m["content"][1] for m in items if m["role"] == "user"][3:]
    marker = parts[0]["text"]
    assert texts.MEDIA_MARKER_RE.fullmatch(marker)
    assert marker.startswith("[image offloaded: png 1280×800, ~1,105 tokens, ref=")
    assert [o.kind for o in plan.offloads] == ["image"] * 3
    assert plan.offloads[0].text == data_url(SHOTS[0])  # the data URL, byte for byte
    assert plan.refs == [o.ref for o in plan.offloads]
    assert plan.tokens_before - plan.tokens_after > 3 * 1000
    again = plan_compaction(plan.items, CHAT, SETTINGS, counter=COUNTER, namespace="ns")  # idempotent
    assert json.dumps(again.items) == json.dumps(plan.items) and not again.offloads


def test_the_same_bytes_give_the_same_ref_and_marker_turn_after_turn():
    urls = [data_url(s) for s in SHOTS]
    first = plan_media(_chat(urls[:5]), CHAT, SETTINGS, counter=COUNTER, namespace="ns")
    second = plan_media(_chat(urls[:6]), CHAT, SETTINGS, counter=COUNTER, namespace="ns")
    assert json.dumps(second.items[:5]) == json.dumps(first.items[:5])  # the prefix stays byte-stable
    repeated = plan_media(_chat([urls[0]] * 5), CHAT, SETTINGS, counter=COUNTER, namespace="ns")
    assert len(repeated.offloads) == 1  # stored once
    other = plan_media(_chat(urls[:5]), CHAT, SETTINGS, counter=COUNTER, namespace="other-namespace")
    assert other.offloads[0].ref != first.offloads[0].ref


def test_what_cannot_be_read_or_lies_is_forwarded_as_it_came():
    png = b64(SHOTS[0])
    odd = [
        "data:image/jpeg;base64," + png,
        "data:image/png;base64,!!!not-base64!!!",
        "data:image/png;base64,",
        "https://example.com/shot.png",
        "data:image/png;base64," + b64(b"GIF89a"),
    ]
    items = _chat(odd + [data_url(s) for s in SHOTS[:3]])
    plan = plan_media(items, CHAT, SETTINGS, counter=COUNTER, namespace="ns")
    assert plan.items == items and not plan.offloads


def test_keep_images_and_mode_off():
    items = _chat([data_url(s) for s in SHOTS])
    one = {"image_batch": 1}
    assert (
        len(plan_media(items, CHAT, OffloadSettings(keep_images=0, **one), counter=COUNTER, namespace="ns").offloads)
        == 6
    )
    assert not plan_media(items, CHAT, OffloadSettings(keep_images=6, **one), counter=COUNTER, namespace="ns").offloads
    assert not plan_media(items, CHAT, OffloadSettings(mode="off", **one), counter=COUNTER, namespace="ns").offloads
    compress = OffloadSettings(mode="compress", **one)
    assert len(plan_compaction(items, CHAT, compress, counter=COUNTER, namespace="ns", compact=False).offloads) == 3


def test_large_base64_documents_and_audio_are_offloaded_small_ones_stay():
    big = "data:application/pdf;base64," + "JVBERi0x" * 2_000
    small = "data:application/pdf;base64,JVBERi0x"
    items = [
        {
            "role": "user",
            "content": [
                {"type": "file", "file": {"file_data": big, "filename": "a.pdf"}},
                {"type": "file", "file": {"file_data": small, "filename": "b.pdf"}},
                {"type": "input_audio", "input_audio": {"data": "UklG" * 3000, "format": "wav"}},
            ],
        },
        {"role": "assistant", "content": "read"},
    ]
    plan = plan_media(items, CHAT, SETTINGS, counter=COUNTER, namespace="ns")
    kinds = [p["type"] for p in plan.items[0]["content"]]
    assert kinds == ["text", "file", "text"]
    assert plan.items[0]["content"][0]["text"].startswith(
        "[document offloaded: application/pdf, 12,000 bytes, ~4,000 tokens"
    )
    assert [o.kind for o in plan.offloads] == ["document", "audio"]
    assert plan.offloads[1].text == "data:audio/wav;base64," + "UklG" * 3000


def _computer_session() -> list[dict]:
    items: list[dict] = [{"role": "user", "content": "Book a flight."}]
    for step, shot in enumerate(SHOTS):
        items.append(
            {
                "type": "computer_call",
                "id": f"cu_{step}",
                "call_id": f"call_{step}",
                "action": {"type": "click", "x": step, "y": 1},
                "pending_safety_checks": [],
                "status": "completed",
            }
        )
        items.append(
            {
                "type": "computer_call_output",
                "call_id": f"call_{step}",
                "output": {"type": "computer_screenshot", "image_url": data_url(shot)},
            }
        )
    return items


def test_responses_screenshots_become_a_placeholder_and_a_marker_message_upstream():
    items = _computer_session()
    plan = plan_compaction(items, RESPONSES, SETTINGS, counter=COUNTER, namespace="ns")
    outputs = [i for i in plan.items if i.get("type") == "computer_call_output"]
    assert [o["output"]["image_url"] == PLACEHOLDER_PNG for o in outputs] == [True] * 3 + [False] * 3
    assert len(plan.items) == len(items)  # one for one (compression relies on it)
    assert len(plan.refs) == 3 and all(texts.media_ref(o[NOTE_KEY]) for o in outputs[:3])
    body = with_history({"model": "m", "input": items}, plan.items)
    assert len(body["input"]) == len(items) + 3 and NOTE_KEY not in json.dumps(body)
    assert body["input"][3] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": outputs[0][NOTE_KEY]}],
    }
    assert plan_compaction(plan.items, RESPONSES, SETTINGS, counter=COUNTER, namespace="ns").items == plan.items


def test_responses_input_image_and_input_file_parts():
    items = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": f"look {i}"},
                {"type": "input_image", "image_url": data_url(s), "detail": "high"},
            ],
        }
        for i, s in enumerate(SHOTS[:4])
    ]
    items.append(
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": [
                {"type": "input_file", "file_data": "data:application/pdf;base64," + "A" * 40_000, "filename": "x.pdf"},
                {"type": "input_image", "file_id": "file-123"},
            ],
        }
    )
    plan = plan_media(items + [{"role": "user", "content": "go"}], RESPONSES, SETTINGS, counter=COUNTER, namespace="ns")
    assert plan.items[0]["content"][1]["type"] == "input_text"
    assert plan.items[4]["output"][0]["type"] == "input_text"
    assert plan.items[4]["output"][1] == {"type": "input_image", "file_id": "file-123"}  # not in the request: kept
    assert sorted(o.kind for o in plan.offloads) == ["document", "image", "image"]  # 5 images, 3 kept


def test_anthropic_image_blocks_inside_tool_results():
    def block(shot: bytes) -> dict:
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(shot)}}

    items: list[dict] = []
    for step, shot in enumerate(SHOTS[:5]):
        items.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{step}", "name": "computer", "input": {"action": "screenshot"}}
                ],
            }
        )
        items.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"t{step}",
                        "content": [block(shot)],
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            }
        )
    plan = plan_compaction(items, MESSAGES, SETTINGS, counter=COUNTER, namespace="ns")
    first = plan.items[1]["content"][0]
    assert first["tool_use_id"] == "t0" and first["cache_control"] == {"type": "ephemeral"}
    assert first["content"][0]["text"].startswith("[image offloaded: png 1280×800, ~1,366 tokens, ref=")
    assert plan.items[5]["content"][0]["content"][0]["type"] == "image"
    assert [o.text for o in plan.offloads] == [f"data:image/png;base64,{b64(s)}" for s in SHOTS[:2]]
    assert MESSAGES.text(plan.items[1]) == first["content"][0]["text"] and len(plan.refs) == 2


def test_images_are_offloaded_in_batches_so_the_prefix_changes_once_per_batch():
    urls = [data_url(s) for s in SHOTS]
    batch = OffloadSettings(image_batch=2)
    offloaded = [
        len(plan_media(_chat(urls[:n]), CHAT, batch, counter=COUNTER, namespace="ns").offloads) for n in range(1, 7)
    ]
    assert offloaded == [0, 0, 0, 0, 2, 2]  # 4 images: one older than the last three, not a whole batch


def test_by_default_older_images_leave_in_chunks_of_the_default_batch():
    default = OffloadSettings()
    keep, batch = default.keep_images, default.image_batch
    assert (keep, batch) == (3, 6)  # the cheapest batch with a prompt cache: docs/performance.md
    urls = [data_url(screenshot(step)) for step in range(keep + 2 * batch + 1)]
    offloaded = [
        len(plan_media(_chat(urls[:n]), CHAT, default, counter=COUNTER, namespace="ns").offloads)
        for n in range(1, len(urls) + 1)
    ]
    # nothing until `batch` images are older than the last `keep`, then a whole batch at a time
    assert offloaded == [(max(0, n - keep) // batch) * batch for n in range(1, len(urls) + 1)]
    assert set(offloaded) == {0, batch, 2 * batch}


def test_anthropic_documents_offloaded_when_large_urls_never():
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x" * 2_000},
        "title": "report.pdf",
    }
    small = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}}
    text = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain " * 5_000}}
    url = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    items = [
        {"role": "user", "content": [pdf, small, text, url, url, url, url]},
        {"role": "assistant", "content": "ok"},
    ]
    plan = plan_media(items, MESSAGES, SETTINGS, counter=COUNTER, namespace="ns")
    blocks = plan.items[0]["content"]
    assert blocks[0] == {"type": "text", "text": blocks[0]["text"]}
    assert blocks[0]["text"].startswith("[document offloaded: application/pdf, 12,000 bytes, ~4,000 tokens, ref=")
    assert blocks[1:] == [small, text, url, url, url, url]  # small, text (counted as text), URLs (never fetched)
    assert [o.text for o in plan.offloads] == ["data:application/pdf;base64," + "JVBERi0x" * 2_000]


def test_without_media_replaces_every_part_with_bytes_whatever_its_age_or_size():
    """The stored form of summarised items: images (the most recent too), documents however small,
    each under the ref `plan_media` gives it, so a screenshot offloaded earlier is stored once."""
    small = "data:application/pdf;base64,JVBERi0x"
    items = _chat([data_url(s) for s in SHOTS[:4]] + ["https://example.com/shot.png", "data:image/png;base64,!!"])
    items.append({"role": "user", "content": [{"type": "file", "file": {"file_data": small, "filename": "b.pdf"}}]})
    stored = without_media(items, CHAT, namespace="ns")
    assert len(stored.items) == len(items) and stored.items[0] == items[0]
    assert data_url(SHOTS[3]) not in json.dumps(stored.items) and "base64" not in json.dumps(stored.items[:9])
    markers = [m["content"][1]["text"] for m in stored.items[1:9:2]]
    assert all(texts.MEDIA_MARKER_RE.fullmatch(m) for m in markers)
    assert [texts.media_ref(m) for m in markers] == [o.ref for o in stored.offloads[:4]]
    assert [o.text for o in stored.offloads] == [data_url(s) for s in SHOTS[:4]] + [small]  # byte for byte
    assert stored.items[9:11] == items[9:11]  # a URL, invalid base64: as they came
    forwarded = plan_media(items, CHAT, OffloadSettings(keep_images=0, image_batch=1), counter=COUNTER, namespace="ns")
    assert [o.ref for o in forwarded.offloads] == [o.ref for o in stored.offloads[:4]]
    assert without_media(stored.items, CHAT, namespace="ns").items == stored.items  # nothing left to replace


def test_without_media_in_responses_and_anthropic_items():
    session = without_media(_computer_session(), RESPONSES, namespace="ns")
    outputs = [i for i in session.items if i.get("type") == "computer_call_output"]
    assert all(o["output"]["image_url"] == PLACEHOLDER_PNG and texts.media_ref(o[NOTE_KEY]) for o in outputs)
    assert [o.text for o in session.offloads] == [data_url(s) for s in SHOTS]
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(SHOTS[0])}}
    items = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [block]}]}]
    messages = without_media(items, MESSAGES, namespace="ns")
    assert texts.media_ref(messages.items[0]["content"][0]["content"][0]["text"]) == messages.offloads[0].ref
    assert messages.offloads[0].text == f"data:image/png;base64,{b64(SHOTS[0])}"


# ==================== ref cache
# The process's memory of media refs: the same ref as make_ref, never another content's or namespace's.


def test_a_content_seen_again_gets_its_ref_without_being_hashed_again():
    cache = RefCache(min_chars=10)
    shot = data_url(screenshot(1))
    assert cache.ref("ns", "image", shot) == make_ref("ns", "image", shot)
    again = (shot + " ")[:-1]  # equal, another object (as a new request's JSON parse gives it)
    assert again is not shot
    assert cache.ref("ns", "image", again) == make_ref("ns", "image", shot)
    assert (cache.hits, cache.misses, cache.chars_hashed) == (1, 1, len(shot))


def test_the_ref_is_computed_per_namespace_and_kind():
    cache = RefCache(min_chars=10)
    shot = data_url(screenshot(2))
    refs = {cache.ref(ns, kind, shot) for ns in ("a", "b") for kind in ("image", "document")}
    assert refs == {make_ref(ns, kind, shot) for ns in ("a", "b") for kind in ("image", "document")}
    assert len(refs) == 4 and cache.hits == 0


def test_a_fingerprint_collision_is_hashed_never_given_the_other_contents_ref(monkeypatch):
    from proxy.core import media

    monkeypatch.setattr(media, "fingerprint", lambda content: 7)  # every content collides
    cache = RefCache(min_chars=10)
    one, two = data_url(screenshot(3)), data_url(screenshot(4))
    assert cache.ref("ns", "image", one) == make_ref("ns", "image", one)
    assert cache.ref("ns", "image", two) == make_ref("ns", "image", two)
    assert cache.ref("ns", "image", one) == make_ref("ns", "image", one)
    assert cache.hits == 0 and cache.misses == 3


def test_one_changed_character_is_another_ref():
    cache = RefCache(min_chars=10)
    shot = data_url(screenshot(5))
    middle = len(shot) // 2 + 1
    changed = shot[:middle] + ("A" if shot[middle] != "A" else "B") + shot[middle + 1 :]
    cache.ref("ns", "image", shot)
    assert cache.ref("ns", "image", changed) == make_ref("ns", "image", changed) != make_ref("ns", "image", shot)


def test_bounded_by_the_characters_it_holds():
    shots = [data_url(screenshot(i)) for i in range(6)]
    cache = RefCache(min_chars=10, max_chars=3 * max(map(len, shots)))
    for shot in shots:
        cache.ref("ns", "image", shot)
    assert len(cache) == 3  # the least recently used evicted
    assert cache.ref("ns", "image", shots[-1]) == make_ref("ns", "image", shots[-1]) and cache.hits == 1
    cache.ref("ns", "image", shots[0])
    assert cache.misses == 7


def test_small_and_huge_contents_are_hashed_and_not_kept():
    cache = RefCache(min_chars=100, max_chars=1000)
    assert cache.ref("ns", "image", "x" * 50) == make_ref("ns", "image", "x" * 50)
    assert cache.ref("ns", "image", "y" * 5000) == make_ref("ns", "image", "y" * 5000)
    assert len(cache) == 0 and cache.chars_hashed == 5050


def test_data_url_header_reads_what_split_and_read_header_read():
    shot = data_url(screenshot(0))
    assert data_url_header(shot) == ("image/png", ImageInfo("png", 1280, 800))
    assert data_url_header(shot) == (split_data_url(shot)[0], read_header(split_data_url(shot)[1]))
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 768, 1024, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    far = b"\xff\xd8\xff\xe1" + struct.pack(">H", 60_002) + b"E" * 60_000 + sof + b"\xff\xd9"
    assert data_url_header("data:image/jpeg;base64," + b64(far)) == ("image/jpeg", ImageInfo("jpeg", 1024, 768))
    for url in ("https://example.com/a.png", "data:image/png,notbase64", "data:image/png;base64", "", "data:"):
        assert data_url_header(url) is None
    assert data_url_header("data:image/png;base64,!!!!") == ("image/png", None)
