"""How JSON bytes are read as text (proxy.core.json_text): the encoding a lenient reader takes
them to be in, and the first character past any amount of whitespace in that encoding."""

from __future__ import annotations

import json

import pytest

from proxy.core import json_text

BODY = '{"items": [{"type": "compaction", "encrypted_content": "offload-compaction-v1:x"}]}'
CODECS = {  # what each spelling is read as: with its byte order mark, or told by its zero bytes
    "utf-8": "utf-8",
    "utf-8-sig": "utf-8-sig",
    "utf-16": "utf-16",
    "utf-16-le": "utf-16-le",
    "utf-16-be": "utf-16-be",
    "utf-32": "utf-32",
    "utf-32-le": "utf-32-le",
    "utf-32-be": "utf-32-be",
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("lead", ["", " ", "\r\n\t ", " " * 300, "\n" * 70_000])
def test_each_encoding_is_told_and_read_past_any_whitespace(codec, lead):
    raw = (lead + BODY).encode(codec)
    assert json_text.encoding(raw) == CODECS[codec]
    assert json.loads(raw) == json.loads(BODY)  # the stdlib reads every one of them: a lenient upstream would
    assert json_text.first_character(raw) == "{"


@pytest.mark.parametrize("codec", CODECS)
def test_whitespace_only_or_nothing_has_no_first_character(codec):
    assert json_text.first_character((" \n" * 40_000).encode(codec)) == ""
    assert json_text.first_character(b"") == ""


def test_a_multipart_body_opens_with_its_boundary():
    assert json_text.first_character(b"\r\n--xyz\r\nContent-Disposition: form-data\r\n\r\n{}\r\n--xyz--") == "-"


def test_bytes_that_are_no_text_are_read_with_replacements_not_errors():
    assert json_text.first_character(b"\xff\xfe\x00\x00\x20") == "\ufffd"  # UTF-32's mark, then a unit cut short
    assert json_text.first_character(b"\x80{") == "\ufffd"


def test_every_encoding_is_named():
    assert {json_text.described(codec) for codec in CODECS.values()} == {
        "UTF-8",
        "UTF-8 with a byte order mark",
        "UTF-16 with a byte order mark",
        "UTF-16LE",
        "UTF-16BE",
        "UTF-32 with a byte order mark",
        "UTF-32LE",
        "UTF-32BE",
    }
    assert json_text.UTF8 == {"utf-8", "utf-8-sig"}
