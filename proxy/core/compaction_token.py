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
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

PREFIX = "offload-compaction-v1:"
ANY_VERSION = "offload-compaction-v"  # what a token of ours starts with, whatever its version
ID_BYTES = TAG_BYTES = 16
MAX_TOKEN_CHARS = 256  # ours are 66 characters; a longer "token" is nothing to look up
APIS = ("responses", "messages")  # whose items a record holds (Responses input items, Messages messages)


class TokenError(ValueError):
    """A token of ours that this namespace may not use: malformed, of another namespace, or of
    a version this proxy does not read."""


def _tag_key(secret: str | None) -> bytes:
    return hashlib.sha256(b"offload-proxy/compaction-token/v1\0" + (secret or "").encode()).digest()


def _tag(record_id: bytes, namespace: str, secret: str | None, api: str) -> bytes:
    material = b"v1\0" + namespace.encode() + b"\0" + record_id
    if api != "responses":  # the Responses tokens' tag as first issued
        material += b"\0" + api.encode()
    return hmac.new(_tag_key(secret), material, hashlib.sha256).digest()[:TAG_BYTES]


def record_id_for(namespace: str, content: bytes) -> bytes:
    """The id of a record: the same content in the same namespace always gives the same token
    (a repeated compaction of the same history answers the same bytes)."""
    return hashlib.sha256(b"offload-compaction-record\0" + namespace.encode() + b"\0" + content).digest()[:ID_BYTES]


def make_token(record_id: bytes, namespace: str, secret: str | None = None, api: str = "responses") -> str:
    raw = record_id + _tag(record_id, namespace, secret, api)
    return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def is_ours(value: object) -> bool:
    """Does `value` (an `encrypted_content`) claim to be one of the proxy's tokens?"""
    return isinstance(value, str) and value.startswith(ANY_VERSION)


def read_token(token: str, namespace: str, secret: str | None = None, api: str = "responses") -> str:
    """The record id (hex) a token of ours names; TokenError when it may not be used here (by
    this namespace, in this API's requests)."""
    if not token.startswith(PREFIX):
        raise TokenError("it is a compaction token of a version this proxy does not read")
    body = token[len(PREFIX):]
    if len(body) > MAX_TOKEN_CHARS:
        raise TokenError("it is not a compaction token this proxy issued")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("it is not a compaction token this proxy issued") from None
    if len(raw) != ID_BYTES + TAG_BYTES:
        raise TokenError("it is not a compaction token this proxy issued")
    record_id, tag = raw[:ID_BYTES], raw[ID_BYTES:]
    if not hmac.compare_digest(tag, _tag(record_id, namespace, secret, api)):
        if any(hmac.compare_digest(tag, _tag(record_id, namespace, secret, other)) for other in APIS if other != api):
            raise TokenError("it was made for another API's requests (a compaction of the Responses API and one "
                             "of the Messages API do not stand for the same kind of history)")
        raise TokenError("it was not issued to this credential (or tenant)")
    return record_id.hex()
