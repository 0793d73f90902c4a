"""Bodies (proxy.http.body). With a Content-Encoding: each coding decoded, stacked codings undone
last first, bombs stopped at the limit without being inflated, corrupt streams a 400, unknown
codings a 415. The charset a relayed JSON body's Content-Type may declare: only one that reads the
bytes the proxy checked as it read them. The fields that name state stored upstream."""

from __future__ import annotations

import gzip
import os
import threading
import tracemalloc
import zlib

import brotli
import pytest
import zstandard

from proxy.errors import ProxyError
from proxy.http import body as body_encoding
from proxy.http.body import codings_of, declared_charsets, decode, decoded, refuse_other_charsets, stored_state
from proxy.http.error_map import status_of

BODY = (
    b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "' + os.urandom(3000).hex().encode() * 20 + b'"}]}'
)
LIMIT = 1 << 20


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


ENCODE = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}


@pytest.mark.parametrize("coding", list(ENCODE))
def test_each_coding_decodes(coding):
    assert decode(ENCODE[coding](BODY), [coding], limit=LIMIT) == BODY


def test_raw_deflate_is_accepted_as_deflate():
    assert decode(raw_deflate(BODY), ["deflate"], limit=LIMIT) == BODY


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_concatenated_members_and_frames_decode_whole(coding):
    half = len(BODY) // 2
    assert decode(ENCODE[coding](BODY[:half]) + ENCODE[coding](BODY[half:]), [coding], limit=LIMIT) == BODY


def test_gzip_padded_with_zeros():
    assert decode(gzip.compress(BODY) + bytes(8), ["gzip"], limit=LIMIT) == BODY


def test_stacked_codings_are_undone_last_first():
    sent = brotli.compress(zstandard.ZstdCompressor().compress(gzip.compress(BODY)))
    codings = codings_of(["gzip, zstd", "br"])  # two header lines: one list, in order
    assert codings == ["gzip", "zstd", "br"]
    assert decode(sent, codings, limit=LIMIT) == BODY


def test_identity_and_empty_values_are_no_coding():
    assert codings_of(["identity", " , IDENTITY "]) == []
    assert codings_of(["Identity, GZip"]) == ["gzip"]
    assert codings_of([]) == []


@pytest.mark.parametrize("coding", list(ENCODE))
def test_an_empty_body_stays_empty(coding):
    assert decode(b"", [coding], limit=LIMIT) == b""


@pytest.mark.parametrize("header", ["compress", "gzip, lzma", "snappy", "x" * 500])
def test_an_unknown_coding_is_a_415(header):
    with pytest.raises(ProxyError) as err:
        codings_of([header])
    assert status_of(err.value) == 415 and err.value.code == "unsupported_content_encoding"
    assert len(err.value.message) < 200


@pytest.mark.parametrize("coding", list(ENCODE))
def test_exactly_the_limit_decodes_one_byte_more_is_a_413(coding):
    data = (BODY * 100)[:LIMIT]
    assert decode(ENCODE[coding](data), [coding], limit=LIMIT) == data
    with pytest.raises(ProxyError) as err:
        decode(ENCODE[coding](data + b" "), [coding], limit=LIMIT)
    assert status_of(err.value) == 413 and err.value.code == "request_too_large"


def zeros_zstd(size: int) -> bytes:
    """`size` zero bytes as one zstd frame, compressed piece by piece (never held whole)."""
    c = zstandard.ZstdCompressor().compressobj()
    piece = bytes(1 << 20)
    return b"".join([c.compress(piece) for _ in range(size >> 20)] + [c.flush()])


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    zeros = bytes(64 << 20)
    made = {
        "gzip": gzip.compress(zeros, 9),
        "deflate": zlib.compress(zeros, 9),
        "raw-deflate": raw_deflate(zeros),
        "br": brotli.compress(zeros, quality=5),
        "zstd": zeros_zstd(1 << 30),
    }
    made["gzip-in-br"] = brotli.compress(made["gzip"])
    return made


@pytest.mark.parametrize("name", ["gzip", "deflate", "raw-deflate", "br", "zstd", "gzip-in-br"])
def test_a_bomb_is_a_413_without_being_inflated(bombs, name):
    """64 MiB of zeros (1 GiB for zstd, ~32 KB sent) against a 1 MiB limit: refused, and at no
    time more than a few MiB held."""
    bomb = bombs[name]
    codings = {"raw-deflate": ["deflate"], "gzip-in-br": ["gzip", "br"]}.get(name, [name])
    assert len(bomb) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(ProxyError) as err:
            decode(bomb, codings, limit=LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status_of(err.value) == 413 and err.value.code == "request_too_large"
    assert f"exceeds {LIMIT} bytes" in err.value.message
    print(name, len(bomb), "bytes sent; peak memory", peak)
    assert peak < 4 * LIMIT + len(bomb), peak


def test_a_bomb_decoder_stops_just_past_the_limit(bombs, monkeypatch):
    """What the decoders made before the refusal: the limit + 1 byte for zlib, at most 512 KiB
    more for brotli and zstd (their output bound is coarser)."""
    made: dict[str, int] = {}
    add = body_encoding._Sink.add

    def counting(self, chunk):
        made[name] = len(self.out) + len(chunk)
        add(self, chunk)

    monkeypatch.setattr(body_encoding._Sink, "add", counting)
    for name in ("gzip", "deflate", "raw-deflate", "br", "zstd"):
        with pytest.raises(ProxyError):
            decode(bombs[name], ["deflate" if name == "raw-deflate" else name], limit=LIMIT)
    print(made)
    assert made["gzip"] == made["deflate"] == made["raw-deflate"] == LIMIT + 1
    assert LIMIT < made["br"] <= LIMIT + (512 << 10) and LIMIT < made["zstd"] <= LIMIT + (512 << 10)


@pytest.mark.parametrize("coding", list(ENCODE))
@pytest.mark.parametrize("damage", ["truncated", "half", "garbage", "trailing", "plain-json"])
def test_a_corrupt_stream_is_a_400(coding, damage):
    sent = ENCODE[coding](BODY)
    sent = {
        "truncated": sent[:-1],
        "half": sent[: len(sent) // 2],
        "garbage": os.urandom(200),
        "trailing": sent + b"garbage!",
        "plain-json": BODY,
    }[damage]
    with pytest.raises(ProxyError) as err:
        decode(sent, [coding], limit=LIMIT)
    assert status_of(err.value) == 400 and err.value.code == "invalid_body", err.value.message
    assert f"could not be decoded as {coding}" in err.value.message


@pytest.fixture
def decoder_threads(monkeypatch) -> list[str]:
    """The threads each decoder call ran on, in order."""
    threads: list[str] = []
    for coding, real in list(body_encoding.DECODERS.items()):

        def spy(data, sink, real=real):
            for made in real(data, sink):
                threads.append(threading.current_thread().name)
                yield made

        monkeypatch.setitem(body_encoding.DECODERS, coding, spy)
    return threads


@pytest.mark.anyio
@pytest.mark.parametrize("coding", list(ENCODE))
async def test_where_a_body_is_decoded_depends_on_what_it_inflates_to(coding, decoder_threads):
    here = threading.current_thread().name
    small = ENCODE[coding](BODY)
    assert await decoded(small, [coding], limit=LIMIT) == (BODY, True)
    assert set(decoder_threads) == {here}  # small once inflated: on the loop, no thread hop
    decoder_threads.clear()
    # a few hundred bytes on the wire, megabytes once inflated: the loop decodes a bounded piece
    # of it, then hands the rest to the CPU pool
    plain = b'{"messages": [{"role": "user", "content": "' + b" " * (8 << 20) + b'"}]}'
    assert await decoded(ENCODE[coding](plain), [coding], limit=16 << 20) == (plain, True)
    on_loop = decoder_threads.index(next(t for t in decoder_threads if t != here))
    assert on_loop >= 1 and set(decoder_threads[:on_loop]) == {here}
    assert {t.split("_")[0] for t in decoder_threads[on_loop:]} == {"offload-cpu"}
    # a bomb too: still a 413 at the limit, its inflating off the loop
    decoder_threads.clear()
    with pytest.raises(ProxyError) as err:
        await decoded(ENCODE[coding](plain), [coding], limit=4 << 20)
    assert status_of(err.value) == 413
    assert decoder_threads[-1].startswith("offload-cpu")
    # a compressed body large on the wire goes to the pool at once
    decoder_threads.clear()
    large = os.urandom(body_encoding.ON_LOOP_BYTES + 1)
    assert await decoded(ENCODE[coding](large), [coding], limit=LIMIT) == (large, True)
    assert {t.split("_")[0] for t in decoder_threads} == {"offload-cpu"}
    assert await decoded(BODY, ["identity"], limit=LIMIT) == (BODY, False)


def test_zstd_makes_bounded_pieces_on_the_loop():
    """On the loop, zstd is fed small inputs: its densest blocks (RLE) make at most a few MB a call."""
    bomb = zstandard.ZstdCompressor(level=19).compress(b" " * (64 << 20))
    where = body_encoding._Where()
    where.on_loop = True
    steps = body_encoding._steps(bomb, ["zstd"], 128 << 20, where=where)
    assert max(next(steps) for _ in range(20)) <= body_encoding.ZSTD_ON_LOOP_INPUT * body_encoding.ZSTD_MAX_RATIO + (
        256 << 10
    )


def test_the_charset_parameters_are_found_unquoted():
    assert declared_charsets(
        [
            "application/json; charset=utf-8",
            'text/plain;CHARSET="UTF-7"',
            "application/json",
            "a/b; x=1; charset = latin1 ",
        ]
    ) == ["utf-8", "UTF-7", "latin1"]


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/json",
        "application/json; charset=utf-8",
        'application/json; charset="UTF-8"',
        "application/json; charset=utf8",
        "text/plain; charset=us-ascii",
        "application/json; charset=ISO-8859-1",
        "application/json; charset=latin1",
    ],
)
def test_charsets_reading_ascii_as_itself_go_on(content_type):
    refuse_other_charsets([] if content_type is None else [content_type])


@pytest.mark.parametrize(
    "charset",
    ["utf-7", "UTF-16", "utf-16le", "utf-32", "cp037", "x-made-up", "", "a\x00b", "u" * 100, "utf-8-sig", "hz"],
)
def test_any_other_is_a_415(charset):
    with pytest.raises(ProxyError) as caught:
        refuse_other_charsets(["application/json", f"application/json; charset={charset}"])
    assert status_of(caught.value) == 415 and caught.value.code == "unsupported_charset"
    assert "charset=" in caught.value.message and "UTF-8" in caught.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"container": "container_1"}, "container"),
        ({"input": [{"id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": None, "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": "input_file", "file_id": "file-1"}]}, "input[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]},
            "messages[0].content",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}
                ]
            },
            "messages[0].content",
        ),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].vector_store_ids"),
        (
            {"tools": [{"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["f"]}}]},
            "tools[0].container.file_ids",
        ),
        ({"images": [{"file_id": "file-1"}]}, "images[0]"),
        ({"mask": {"file_id": "file-1"}}, "mask"),
        ({"container": {"id": "container_1"}}, "container"),
        ({"container": {"skills": [{"type": "custom", "skill_id": "skill_1"}]}}, "container.skills"),
        ({"messages": [{"role": "assistant", "audio": {"id": "audio_1"}}]}, "messages[0].audio"),
    ],
)
def test_named_state(body, param):
    assert stored_state(body) == param


@pytest.mark.parametrize(
    "body",
    [
        {"previous_response_id": None, "conversation": "", "input": "hi"},
        {"prompt": "Say hi"},  # a legacy completion's prompt
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
            ]
        },
        {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
        {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}], "messages": "x"},
        {"input": [1, "x", None, {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]},
        {"container": {"skills": [{"type": "anthropic", "skill_id": "pptx"}]}},
        {"messages": [{"role": "assistant", "audio": None}]},
        [],
        "x",
        None,
    ],
)
def test_no_state(body):
    assert stored_state(body) is None
