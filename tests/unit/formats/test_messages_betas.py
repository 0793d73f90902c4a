"""`without_emulated_betas`: only the emulated values leave `anthropic-beta`; the rest stays as sent."""

from __future__ import annotations

import pytest

from proxy.formats.messages._emulation import without_emulated_betas

CM = b"context-management-2025-06-27"


@pytest.mark.parametrize(
    "headers, expected",
    [
        ([(b"anthropic-beta", CM)], []),
        ([(b"Anthropic-Beta", b"a-1, " + CM + b" ,b-2")], [(b"Anthropic-Beta", b"a-1,b-2")]),
        ([(b"anthropic-beta", b"a-1, b-2")], [(b"anthropic-beta", b"a-1, b-2")]),  # untouched: byte for byte
        (
            [(b"anthropic-beta", CM), (b"anthropic-beta", b"files-api-2025-04-14")],
            [(b"anthropic-beta", b"files-api-2025-04-14")],
        ),
        ([(b"x-other", CM), (b"anthropic-beta", b",,")], [(b"x-other", CM)]),
        ([(b"anthropic-beta", CM + b"x")], [(b"anthropic-beta", CM + b"x")]),  # a value, not a prefix
    ],
)
def test_only_the_emulated_values_are_removed(headers, expected):
    assert without_emulated_betas(headers) == expected
