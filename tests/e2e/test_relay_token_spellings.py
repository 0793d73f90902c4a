"""A compaction token of the proxy's never reaches an upstream through the relayed paths that carry
items (`POST /v1/conversations`, `/v1/conversations/{id}/items`, `/v1/messages/batches`), nor
through `/v1/responses/input_tokens`, in any spelling of the body (issue 38): leading whitespace
past any look-ahead, UTF-16 and UTF-32 with and without a byte order mark, every content coding the
proxy undoes and those it cannot (`x-custom`, `compress`), another Content-Type or none, a charset
under which the same bytes read otherwise (UTF-7), a chunked body, a body on another method, the
path spelt otherwise. Each is refused in the endpoint's own shape with nothing sent upstream; a
body without a token still goes through, and what the upstream gets is what the proxy checked."""

from __future__ import annotations

import base64
import gzip
import json
import zlib

import brotli
import httpx2
import pytest
import zstandard

from proxy.core.compaction import make_token, sealed_fields
from tests.harness.requests import request

TOKEN = make_token(b"\x01" * 16, "a-namespace")  # any token of ours is refused on these paths, whoever made it
OPENAI = {"Authorization": "Bearer sk-spellings"}
ANTHROPIC = {"x-api-key": "sk-ant-spellings", "anthropic-version": "2023-06-01"}
PATHS = {  # path: (family, its body carrying `item`)
    "conversations": ("openai", lambda item: {"items": [item]}),
    "conversations/conv_1/items": ("openai", lambda item: {"items": [item]}),
    "messages/batches": (
        "anthropic",
        lambda item: {
            "requests": [
                {
                    "custom_id": "a",
                    "params": {
                        "model": "claude-sonnet-4-5",
                        "max_tokens": 5,
                        "messages": [{"role": "assistant", "content": [item]}, {"role": "user", "content": "next"}],
                    },
                }
            ]
        },
    ),
}


def carrying(path: str, token: str = TOKEN) -> dict:
    family, body = PATHS[path]
    if family == "anthropic":
        return body({"type": "compaction", "content": "s", "encrypted_content": token})
    return body({"type": "compaction", "encrypted_content": token})


def harmless(path: str) -> dict:
    family, body = PATHS[path]
    return body(
        {"type": "text", "text": "hi"}
        if family == "anthropic"
        else {"type": "message", "role": "user", "content": "hi"}
    )


@pytest.fixture(scope="module")
def proxy_url(make_proxy):
    with make_proxy() as url:
        yield url


def credential(path: str) -> dict[str, str]:
    return ANTHROPIC if path.lower().startswith("messages") else OPENAI


def assert_refused(r: httpx2.Response, path: str, status: int, *words: str) -> None:
    assert r.status_code == status, (r.status_code, r.text[:400])
    body = r.json()
    if path.startswith("messages"):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        message = body["error"]["message"]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        message = body["error"]["message"]
    for word in words:
        assert word in message, message


def utf7(text: str) -> bytes:
    """`text` in UTF-7, every character but letters, digits and spaces written in base64 (`+ACI-`
    for a quote): plain ASCII without a quote or a backslash, a JSON string's text to a UTF-8 reader."""
    return "".join(
        c if c.isalnum() or c == " " else "+" + base64.b64encode(c.encode("utf-16-be")).decode().rstrip("=") + "-"
        for c in text
    ).encode()


# ---------------------------------------------------------------- text encodings

ENCODINGS = {
    "utf-16": "UTF-16 with a byte order mark",
    "utf-16-le": "UTF-16LE",
    "utf-16-be": "UTF-16BE",
    "utf-32": "UTF-32 with a byte order mark",
    "utf-32-le": "UTF-32LE",
    "utf-32-be": "UTF-32BE",
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_body_in_utf16_or_utf32_is_refused_naming_its_encoding(proxy_url, upstream, path, encoding):
    """Python's json.loads (a vLLM or FastAPI upstream) reads these bodies, token and all: refused,
    as on the managed endpoints, the message naming the encoding (with or without its mark)."""
    for body in (json.dumps(carrying(path)), json.dumps(harmless(path)), " " * 300 + json.dumps(carrying(path))):
        r = request(proxy_url, f"/v1/{path}", body=body.encode(encoding), headers=credential(path))
        assert_refused(r, path, 400, f"it is {ENCODINGS[encoding]}", "UTF-8")
    assert upstream.requests == []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("lead", [" " * 300, "\n" * 300, "\r\n\t " * 100, " " * 70_000])
def test_leading_whitespace_hides_nothing(proxy_url, upstream, path, lead):
    r = request(proxy_url, f"/v1/{path}", body=(lead + json.dumps(carrying(path))).encode(), headers=credential(path))
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []
    plain = (lead + json.dumps(harmless(path))).encode()
    r = request(proxy_url, f"/v1/{path}", body=plain, headers=credential(path))
    assert r.status_code == 200, r.text[:300]
    assert [rec.body for rec in upstream.requests] == [plain]  # no token: byte for byte


@pytest.mark.parametrize("path", PATHS)
def test_a_utf8_byte_order_mark_is_read_through(proxy_url, upstream, path):
    r = request(
        proxy_url, f"/v1/{path}", body=b"\xef\xbb\xbf" + json.dumps(carrying(path)).encode(), headers=credential(path)
    )
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []


# ---------------------------------------------------------------- content codings

CODINGS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstandard.ZstdCompressor().compress,
    "gzip, br": lambda data: brotli.compress(gzip.compress(data)),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("coding", CODINGS)
def test_every_coding_the_proxy_undoes_is_undone_before_the_body_is_judged(proxy_url, upstream, path, coding):
    encode = CODINGS[coding]
    r = request(
        proxy_url,
        f"/v1/{path}",
        body=encode((" " * 300 + json.dumps(carrying(path))).encode()),
        headers={**credential(path), "Content-Encoding": coding},
    )
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []
    plain = json.dumps(harmless(path)).encode()
    r = request(proxy_url, f"/v1/{path}", body=encode(plain), headers={**credential(path), "Content-Encoding": coding})
    assert r.status_code == 200, r.text[:300]
    [rec] = upstream.requests  # what was judged goes: the decoded bytes, no longer encoded
    assert rec.body == plain and "content-encoding" not in rec.headers


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("coding", ["x-custom", "compress", "gzip, x-custom", "identity, compress"])
def test_a_coding_the_proxy_cannot_undo_is_refused_not_relayed(proxy_url, upstream, path, coding):
    """`compress` (LZW) or a made-up coding: the proxy cannot read the body, so it cannot tell it
    holds no token: a 415 naming the coding, as on the managed endpoints, never passed on."""
    for body in (json.dumps(carrying(path)).encode(), json.dumps(harmless(path)).encode()):
        r = request(proxy_url, f"/v1/{path}", body=body, headers={**credential(path), "Content-Encoding": coding})
        assert_refused(r, path, 415, coding.rpartition(", ")[2], "not supported")
    assert upstream.requests == []


@pytest.mark.parametrize("path", PATHS)
def test_a_corrupt_stream_is_refused(proxy_url, upstream, path):
    r = request(
        proxy_url,
        f"/v1/{path}",
        body=gzip.compress(json.dumps(carrying(path)).encode())[:-12],
        headers={**credential(path), "Content-Encoding": "gzip"},
    )
    assert_refused(r, path, 400, "gzip")
    assert upstream.requests == []


# ---------------------------------------------------------------- labels, charsets, framing, methods


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "application/octet-stream",
        "application/json; charset=utf-8",
        'application/json; charset="UTF-8"',
    ],
)
def test_a_json_body_under_any_label_is_judged(proxy_url, upstream, path, content_type):
    r = request(
        proxy_url,
        f"/v1/{path}",
        body=json.dumps(carrying(path)).encode(),
        headers={**credential(path), "Content-Type": content_type},
    )
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []


@pytest.mark.parametrize("path", PATHS)
def test_a_multipart_body_is_no_way_around(proxy_url, upstream, path):
    """These endpoints take JSON: a form holding the JSON as a field is not read as a form, but
    refused (no upload goes unread here), whether it holds a token or not."""
    for body in (carrying(path), harmless(path)):
        form = (
            b'--xyz\r\nContent-Disposition: form-data; name="body"\r\n\r\n'
            + json.dumps(body).encode()
            + b"\r\n--xyz--\r\n"
        )
        r = request(
            proxy_url,
            f"/v1/{path}",
            body=form,
            headers={**credential(path), "Content-Type": "multipart/form-data; boundary=xyz"},
        )
        assert_refused(r, path, 400, "not valid JSON")
    assert upstream.requests == []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("charset", ["utf-7", "UTF-16", "utf-32le", "x-unknown", "ebcdic-cp-us"])
def test_a_charset_that_would_read_the_bytes_otherwise_is_refused(proxy_url, upstream, path, charset):
    """In UTF-7 `+ACI-` is a quote: the same ASCII bytes are a harmless string to the proxy and a
    token in an `encrypted_content` to an upstream that honours the charset (Express's
    body-parser takes any utf-*)."""
    hidden = json.dumps(carrying(path))[1:-1]  # the object's members, as UTF-7 inside a JSON string
    body = b'{"note": "' + utf7('", ' + hidden + ', "x": "') + b'"}'
    assert list(json.loads(body)) == ["note"]  # plain text to a UTF-8 reader
    assert list(sealed_fields(json.loads(body.decode("utf-7"))))  # a token in position to a UTF-7 reader
    r = request(
        proxy_url,
        f"/v1/{path}",
        body=body,
        headers={**credential(path), "Content-Type": f"application/json; charset={charset}"},
    )
    assert_refused(r, path, 415, "charset", "UTF-8")
    assert upstream.requests == []


@pytest.mark.parametrize("path", PATHS)
def test_an_ascii_compatible_charset_goes_on(proxy_url, upstream, path):
    plain = json.dumps(harmless(path)).encode()
    for charset in ("us-ascii", "ISO-8859-1", "utf8"):
        r = request(
            proxy_url,
            f"/v1/{path}",
            body=plain,
            headers={**credential(path), "Content-Type": f"application/json; charset={charset}"},
        )
        assert r.status_code == 200, r.text[:300]
    assert [rec.body for rec in upstream.requests] == [plain] * 3


@pytest.mark.parametrize("path", PATHS)
def test_a_chunked_body_is_read_whole(proxy_url, upstream, path):
    body = json.dumps(carrying(path)).encode()
    pieces = iter([body[i : i + 7] for i in range(0, len(body), 7)])  # no Content-Length: chunked
    r = httpx2.post(
        f"{proxy_url}/v1/{path}",
        content=pieces,
        timeout=30,
        headers={**credential(path), "Content-Type": "application/json"},
    )
    assert r.request.headers["transfer-encoding"] == "chunked"
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE"])
def test_a_body_on_another_method_is_judged_too(proxy_url, upstream, path, method):
    """An upstream (or a gateway honouring X-HTTP-Method-Override) may read a body on any method."""
    r = request(
        proxy_url,
        f"/v1/{path}",
        method=method,
        body=json.dumps(carrying(path)).encode(),
        headers={**credential(path), "X-HTTP-Method-Override": "POST"},
    )
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []
    r = request(
        proxy_url, f"/v1/{path}", method=method, body=b"", headers=credential(path)
    )  # no body: relayed as it is
    assert r.status_code == 200 and len(upstream.requests) == 1


@pytest.mark.parametrize(
    "spelt,path",
    [
        ("Conversations", "conversations"),
        ("conversations;v=1", "conversations"),
        ("CONVERSATIONS/conv_1/ITEMS", "conversations/conv_1/items"),
        ("conversations%5Cconv_1%5Citems", "conversations/conv_1/items"),
        ("conversations/conv_1;x/items", "conversations/conv_1/items"),
        ("messages/Batches", "messages/batches"),
        ("messages/batches;jsessionid=1", "messages/batches"),
    ],
)
def test_a_path_spelt_otherwise_is_still_judged(proxy_url, upstream, spelt, path):
    """Upstreams that route paths case-insensitively, read a backslash as a slash or drop `;params`
    (servlet containers) would take these for the item paths."""
    r = request(proxy_url, f"/v1/{spelt}", body=json.dumps(carrying(path)).encode(), headers=credential(spelt))
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []


@pytest.mark.parametrize("path", PATHS)
def test_an_escaped_key_and_a_duplicate_key_are_read_as_the_upstream_reads_them(proxy_url, upstream, path):
    escaped = json.dumps(carrying(path)).replace("encrypted_content", "encrypted\\u005fcontent").encode()
    r = request(proxy_url, f"/v1/{path}", body=escaped, headers=credential(path))
    assert_refused(r, path, 400, "compaction token")
    assert upstream.requests == []
    # a first-wins reader would see the token in the first `items`: the upstream gets the object checked
    first = json.dumps(carrying(path))[:-1]
    rest = json.dumps(harmless(path))[1:]
    r = request(proxy_url, f"/v1/{path}", body=(first + ", " + rest).encode(), headers=credential(path))
    assert r.status_code == 200, r.text[:300]
    [rec] = upstream.requests
    assert TOKEN not in rec.body.decode() and json.loads(rec.body) == harmless(path)


# ---------------------------------------------------------------- /v1/responses/input_tokens


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_input_tokens_in_utf16_or_utf32_is_refused(proxy_url, upstream, encoding):
    """The relay's quick test for a token looks at the bytes: in UTF-16 it found none, and the
    body went upstream as sent."""
    body = {
        "model": "gpt-5",
        "input": [
            {"type": "compaction", "encrypted_content": TOKEN},
            {"type": "message", "role": "user", "content": "next"},
        ],
    }
    r = request(
        proxy_url,
        "/v1/responses/input_tokens",
        body=json.dumps(body).encode(encoding),
        headers=credential("responses/input_tokens"),
    )
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]["message"], r.text[:300]
    assert upstream.requests == []


def test_input_tokens_under_a_utf7_charset_is_refused(proxy_url, upstream):
    r = request(
        proxy_url,
        "/v1/responses/input_tokens",
        body=json.dumps({"model": "gpt-5", "input": "hi"}).encode(),
        headers={**credential("responses/input_tokens"), "Content-Type": "application/json; charset=utf-7"},
    )
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_charset", r.text[:300]
    assert upstream.requests == []
