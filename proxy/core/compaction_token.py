"""The proxy's own compaction tokens: what an emulated compaction item carries. Pure.

When the proxy emulates the providers' compaction (`POST /v1/responses/compact`, Responses
`context_management`), the `compaction` item it answers holds, as `encrypted_content`, a token
of its own instead of the provider's encrypted state:

    offload-compaction-v1:<base64url(record id (16 bytes) + tag (16 bytes))>

The record id names the stored items the token stands for (the summary with its `ref=`, and
what the compaction kept), in the namespace that made it; the tag is an HMAC of the version, the
namespace, the id and the API whose items the record holds (Responses items, or Messages
messages: a token moved from one API's compaction into the other's is refused, not read as the
other's history), keyed by the server's names key (`--namespace-key`, else `--encryption-key`) when there is one. A
token is therefore bound to its namespace twice: another credential's tag does not verify, and
its record is not in the other's store. The token holds no content: the content stays in the
store, reloadable and encrypted at rest like every offload. The version lets a later format
recognise and refuse (or read) older tokens.

Only the canonical spelling is read: the prefix, then exactly 43 characters of the URL-safe
base64 alphabet, no padding, no whitespace, the unused low bits zero (the spelling `make_token`
writes). Anything else that claims to be ours (any case, around whitespace) is refused, never
read leniently nor passed on as someone else's.

Where a token is one: as the value of an `encrypted_content` field (a Responses item, a Messages
block, at any depth: `sealed_fields`). The same characters inside text (a message, a tool
output) are content like any other and are never read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from typing import Any

from proxy.core import large_json
from proxy.errors import Failure, Kind

PREFIX = "offload-compaction-v1:"
ANY_VERSION = "offload-compaction-v"  # what a token of ours starts with, whatever its version
ID_BYTES = TAG_BYTES = 16
MAX_TOKEN_CHARS = 256  # ours are 66 characters; a longer "token" is nothing to look up
BODY_CHARS = 43  # base64url of ID_BYTES + TAG_BYTES, unpadded
_CANONICAL = re.compile(r"[A-Za-z0-9_-]{%d}" % BODY_CHARS)
SEALED_FIELD = "encrypted_content"  # the field a compaction item (block) carries its state in
_SEALED_KEY = f'"{SEALED_FIELD}"'.encode()
APIS = ("responses", "messages")  # whose items a record holds (Responses input items, Messages messages)


class TokenError(Failure, ValueError):
    """A token of ours that this namespace may not use: malformed, of another namespace, or of
    a version this proxy does not read."""

    kind = Kind.UNPROCESSABLE


def _tag_key(secret: str | None) -> bytes:
    return hashlib.sha256(b"offload-proxy/compaction-token/v1\0" + (secret or "").encode()).digest()


def _tag(record_id: bytes, namespace: str, secret: str | None, *, api: str) -> bytes:
    material = b"v1\0" + namespace.encode() + b"\0" + record_id
    if api != "responses":  # the Responses tokens' tag as first issued
        material += b"\0" + api.encode()
    return hmac.new(_tag_key(secret), material, hashlib.sha256).digest()[:TAG_BYTES]


def record_id_for(namespace: str, content: bytes) -> bytes:
    """The id of a record: the same content in the same namespace always gives the same token
    (a repeated compaction of the same history answers the same bytes)."""
    return hashlib.sha256(b"offload-compaction-record\0" + namespace.encode() + b"\0" + content).digest()[:ID_BYTES]


def make_token(record_id: bytes, namespace: str, secret: str | None = None, *, api: str = "responses") -> str:
    raw = record_id + _tag(record_id, namespace, secret, api=api)
    return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def is_ours(value: object) -> bool:
    """Does `value` (an `encrypted_content`) claim to be one of the proxy's tokens, in any
    spelling (case, surrounding whitespace)? Such a value is read (`read_token`) or refused,
    never forwarded: a provider's encrypted state never holds these characters."""
    return isinstance(value, str) and (ANY_VERSION in value or ANY_VERSION in value[:MAX_TOKEN_CHARS].lower())


def may_hold_token(text: bytes) -> bool:
    """Could a JSON document (its bytes, escapes undone) hold a token of ours where one counts?
    Only if it has an `encrypted_content` key (a fast test, about 6 ms for 20 MB, before
    `sealed_fields` walks it). A token elsewhere is text, never read."""
    return large_json.contains(text, _SEALED_KEY)


def may_spell_token(raw: bytes) -> bool:
    """`may_hold_token` on bytes as they came, escapes not undone: a body that escapes a
    printable ASCII character (`\\u0020` to `\\u007f`) may spell the key otherwise, so it is read
    too. Escapes of other characters (`\\u00e9`, `\\u4e2d`: what `ensure_ascii` writes) cannot."""
    return may_hold_token(raw) or escapes_ascii(raw)


_ASCII_ESCAPE = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")


def escapes_ascii(raw: bytes) -> bool:
    """Does the JSON text `raw` escape a printable ASCII character (what could spell the key)?
    Searched a slice at a time, as `large_json.contains` searches."""
    if not large_json.contains(raw, b"\\u00"):
        return False
    step = large_json.SEARCH_SLICE
    return any(_ASCII_ESCAPE.search(raw, start, start + step + 5) for start in range(0, len(raw), step))


_FOUND = object()  # sealed_fields' mark of a token found in an array
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _field_path(at: str, key: str) -> str:
    """`at.key`, or `at["key"]` (JSON-quoted) for a key that is no plain name: a key spelled
    `input[1]` must not name the path of `input`'s second item (whose compaction position its
    caller would then accept)."""
    if _NAME.fullmatch(key):
        return f"{at}.{key}" if at else key
    return f"{at}[{json.dumps(key)}]"


def sealed_fields(value: Any, path: str = "") -> Iterator[str]:
    """The paths (`input[3].encrypted_content`, `messages[0].content[1].encrypted_content`) of the
    `encrypted_content` fields holding a token of ours in `value`, at any depth (iterative: a
    deep document costs no recursion). An `encrypted_content` that is an array or an object
    holding one (`["offload-compaction-v1:…"]`) names the string's own path inside it
    (`input[0].encrypted_content[0]`): no compaction position, and never forwarded."""
    stack: list[tuple[Any, str, bool]] = [(value, path, False)]
    while stack:
        node, at, sealed = stack.pop()  # sealed: inside the value of an `encrypted_content`
        if type(node) is dict:
            for k, v in node.items():
                here = _field_path(at, k)
                if (k == SEALED_FIELD or sealed) and is_ours(v):
                    yield here
                elif type(v) is dict or type(v) is list:
                    stack.append((v, here, sealed or k == SEALED_FIELD))
        elif type(node) is list:
            for i in range(len(node) - 1, -1, -1):
                v = node[i]
                if sealed and is_ours(v):
                    stack.append((_FOUND, f"{at}[{i}]", True))  # yielded in its turn: document order
                elif type(v) is dict or type(v) is list:
                    stack.append((v, f"{at}[{i}]", sealed))
        elif node is _FOUND:
            yield at


def read_token(token: str, namespace: str, secret: str | None = None, *, api: str = "responses") -> str:
    """The record id (hex) a token of ours names; TokenError when it may not be used here (by
    this namespace, in this API's requests)."""
    if not token.startswith(PREFIX):
        if token.startswith(ANY_VERSION):
            raise TokenError("it is a compaction token of a version this proxy does not read")
        raise TokenError("it is not a compaction token this proxy issued (not its exact spelling)")
    body = token[len(PREFIX) :]
    if not _CANONICAL.fullmatch(body):
        raise TokenError("it is not a compaction token this proxy issued (not its exact spelling)")
    try:
        raw = base64.urlsafe_b64decode(body + "=")
    except (binascii.Error, ValueError):
        raise TokenError("it is not a compaction token this proxy issued") from None
    if len(raw) != ID_BYTES + TAG_BYTES or base64.urlsafe_b64encode(raw).decode().rstrip("=") != body:
        raise TokenError("it is not a compaction token this proxy issued (not its exact spelling)")
    record_id, tag = raw[:ID_BYTES], raw[ID_BYTES:]
    if not hmac.compare_digest(tag, _tag(record_id, namespace, secret, api=api)):
        if any(
            hmac.compare_digest(tag, _tag(record_id, namespace, secret, api=other)) for other in APIS if other != api
        ):
            raise TokenError(
                "it was made for another API's requests (a compaction of the Responses API and one "
                "of the Messages API do not stand for the same kind of history)"
            )
        raise TokenError("it was not issued to this credential (or tenant)")
    return record_id.hex()
