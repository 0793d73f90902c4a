"""Image sizes from headers only, and the providers' billing formulas."""

from __future__ import annotations

import base64
import struct

import pytest

from proxy.core import images
from proxy.core.images import ImageInfo, anthropic_tokens, openai_tokens, read_header
from tests.harness.screens import b64, png, screenshot


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
    assert openai_tokens(None) == images.FALLBACK_OPENAI == 765


def test_anthropic_billing():
    assert anthropic_tokens(ImageInfo("png", 1280, 800)) == 1366
    assert anthropic_tokens(ImageInfo("png", 200, 200)) == 54
    big = anthropic_tokens(ImageInfo("png", 4000, 3000))
    assert 1500 <= big <= 1540  # scaled to 1.15 megapixels
    assert anthropic_tokens(None) == images.FALLBACK_ANTHROPIC == 1399


def test_split_data_url():
    assert images.split_data_url("data:image/PNG;base64,QUJD") == ("image/png", "QUJD")
    assert images.split_data_url("data:image/png,QUJD") is None
    assert images.split_data_url("https://example.com/a.png") is None


def test_only_the_head_of_a_large_payload_is_decoded(monkeypatch):
    seen: list[int] = []
    real = images.binascii.a2b_base64
    monkeypatch.setattr(images.binascii, "a2b_base64", lambda data, **kw: seen.append(len(data)) or real(data, **kw))
    payload = b64(screenshot(4)) + base64.b64encode(b"\x00" * 3_000_000).decode()
    assert read_header(payload) == ImageInfo("png", 1280, 800)
    assert max(seen) <= images.HEAD_CHARS
