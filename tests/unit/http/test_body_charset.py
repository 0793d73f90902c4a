"""The charset a relayed JSON body's Content-Type may declare (proxy.http.body_charset): only one
that reads the bytes the proxy checked as it read them."""

from __future__ import annotations

import pytest

from proxy.errors import ProxyError
from proxy.http.body_charset import declared_charsets, refuse_other_charsets
from proxy.http.error_map import status_of


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
