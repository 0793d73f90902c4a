"""Reloaded media in each format's reload round: the image or document itself where the format
allows it, text where it cannot carry it."""

from __future__ import annotations

from proxy.core import texts
from proxy.core.media import Reloaded, as_text
from proxy.formats.chat._rounds import ChatRounds
from proxy.formats.messages._rounds import tool_results
from proxy.formats.responses._rounds import injected_results

IMAGE = Reloaded("img1234", "image", "data:image/png;base64,iVBORw0KGgoAAAA")
PDF = Reloaded("doc1234", "document", "data:application/pdf;base64,JVBERi0xLjcK")
AUDIO = Reloaded("aud1234", "audio", "data:audio/wav;base64,UklGRgAAAA")


def test_anthropic_tool_results_carry_image_and_document_blocks():
    calls = [{"id": "t1"}, {"id": "t2"}, {"id": "t3"}, {"id": "t4"}]
    message = tool_results(calls, [IMAGE, PDF, AUDIO, "text"])
    contents = [block["content"] for block in message["content"]]
    assert contents[0] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAA"}}
    ]
    assert contents[1] == [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjcK"}}
    ]
    assert contents[2] == texts.media_not_here("audio", "aud1234") and contents[3] == "text"


def test_responses_outputs_carry_input_image_and_input_file():
    outputs = injected_results([{"call_id": "a"}, {"call_id": "b"}, {"call_id": "c"}], [IMAGE, PDF, AUDIO])
    assert outputs[0]["output"] == [{"type": "input_image", "image_url": IMAGE.data_url}]
    assert outputs[1]["output"] == [{"type": "input_file", "file_data": PDF.data_url, "filename": "doc1234"}]
    assert outputs[2]["output"] == texts.media_not_here("audio", "aud1234")


def test_chat_answers_with_text_and_shows_the_media_in_a_user_message_after_the_tool_messages():
    rounds = ChatRounds({"model": "m", "messages": []}, [{"role": "user", "content": "hi"}], [])
    rounds._pending = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "context_reload", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "context_reload", "arguments": "{}"}},
            {"id": "c3", "type": "function", "function": {"name": "context_search", "arguments": "{}"}},
        ],
    }
    rounds.answer([IMAGE, AUDIO, "found"])
    *_, tool1, tool2, tool3, shown = rounds.messages
    assert [tool1["content"], tool2["content"], tool3["content"]] == [
        texts.media_follows("image", "img1234"),
        texts.media_follows("audio", "aud1234"),
        "found",
    ]
    assert shown["role"] == "user" and shown["content"][1] == {
        "type": "image_url",
        "image_url": {"url": IMAGE.data_url},
    }
    assert shown["content"][3] == {"type": "input_audio", "input_audio": {"data": "UklGRgAAAA", "format": "wav"}}


def test_a_result_carried_to_the_client_is_text():
    assert as_text(IMAGE) == texts.media_carried("image", "img1234") and as_text("x") == "x"
