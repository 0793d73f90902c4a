"""The charset a request's Content-Type declares, where the proxy reads the body as JSON to check it.

The proxy reads a JSON body as UTF-8 (`proxy.core.jsonio`). An upstream that honours a declared
charset reads other text from the same bytes: Express's body-parser takes any `utf-*` charset,
UTF-7 among them, where `+ACI-` is a quote, so a string the proxy read as plain text could be, for
that upstream, a field the proxy never saw (a compaction token's `encrypted_content`, a
`previous_response_id` on the shared key). So where a body is checked (a managed endpoint's, or a
relayed one the proxy reads), a charset that does
not read the checked bytes as the proxy did (anything but UTF-8, US-ASCII or ISO-8859-1, which
read ASCII as themselves and can make no ASCII of other bytes) is a 415 `unsupported_charset`.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from proxy.errors import Kind, ProxyError

READ_AS_CHECKED = frozenset({"utf-8", "ascii", "iso8859-1"})  # codec names (`codecs.lookup(...).name`)


def declared_charsets(content_types: Iterable[str]) -> list[str]:
    """The `charset` parameters of the Content-Type values, unquoted, as written."""
    found = []
    for value in content_types:
        for parameter in value.split(";")[1:]:
            name, _, given = parameter.partition("=")
            if name.strip().lower() == "charset":
                found.append(given.strip().strip('"').strip())
    return found


def refuse_other_charsets(content_types: Iterable[str]) -> None:
    """ProxyError 415 for a declared charset other than those in READ_AS_CHECKED (or unknown)."""
    for charset in declared_charsets(content_types):
        try:
            codec = codecs.lookup(charset).name if len(charset) <= 64 else ""
        except (LookupError, ValueError):  # unknown, or a NUL in the name
            codec = ""
        if codec not in READ_AS_CHECKED:
            raise ProxyError(
                Kind.UNSUPPORTED_MEDIA,
                f"Content-Type declares charset={charset[:40]!r}: a JSON body is read as UTF-8 "
                "(RFC 8259); send it in UTF-8, with charset=utf-8 or none.",
                code="unsupported_charset",
            )
