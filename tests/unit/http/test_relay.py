import pytest

from proxy.http.relay import looks_like_json

BODY = '{"previous_response_id": "resp_x"}'


@pytest.mark.parametrize(
    "raw",
    [
        BODY.encode(),
        b"  \r\n" + BODY.encode(),
        b"\xef\xbb\xbf" + BODY.encode(),
        BODY.encode("utf-16"),
        BODY.encode("utf-16-be"),
        BODY.encode("utf-32"),
        b"[1]",
        # past any look-ahead of the head (issue 38: 256 bytes were read)
        b" " * 300 + BODY.encode(),
        b"\n" * 70_000 + BODY.encode(),
        (" " * 300 + BODY).encode("utf-16-le"),
        (" " * 300 + BODY).encode("utf-32"),
    ],
)
def test_json_in_any_spelling_looks_like_json(raw):
    assert looks_like_json(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'--xyz\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--xyz--\r\n',
        b"\r\n--xyz\r\n",
        b"",
        b"model=m&previous_response_id=x",
        b'"a string"',
    ],
)
def test_a_multipart_body_does_not(raw):
    assert not looks_like_json(raw)
