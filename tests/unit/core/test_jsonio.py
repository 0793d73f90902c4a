"""jsonio.loads reads UTF-8 only: the stdlib fallback would take surrogates encoded as bytes."""

import pytest

from proxy.core import jsonio


@pytest.mark.parametrize(
    "raw",
    [b'{"t": "hi \xed\xa0\xbd"}', '{"t": 1}'.encode("utf-16"), b'{"t": "\xc3"}', b'{"t": "\xed\xa0\xbd", "n": 1e400}'],
)
def test_invalid_utf8_bytes_are_refused(raw):
    with pytest.raises(ValueError, match="UTF-8"):
        jsonio.loads(raw)


def test_what_only_the_fallback_reads_still_parses():
    assert jsonio.loads(b'{"t": "hi \\ud83d"}') == {"t": "hi \ud83d"}  # an escape: valid JSON text
    assert jsonio.loads(b'\xef\xbb\xbf{"t": "caf\xc3\xa9"}') == {"t": "caf\u00e9"}  # UTF-8 with a BOM
    assert jsonio.loads(b'{"n": 36893488147419103232}') == {"n": 2**65}
    assert jsonio.loads('{"t": "\ud83d"}') == {"t": "\ud83d"}  # text is not bytes: nothing to decode
