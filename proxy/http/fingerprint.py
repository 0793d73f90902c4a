"""A name a person can tell a tenant by, made when its credential is seen.

Where clients send their own provider keys, a tenant is a hash of its key: the dashboard could
only show that hash. Its label is the key's *fingerprint* instead, the vendor prefix and the
last four characters (`sk-proj…AbCd`), as the providers' own consoles show keys. It reveals at
most those: the prefix is a few lowercase letters and dashes, at most 8 characters (`sk-`,
`sk-proj-`, `sk-ant-`), and a key too short to keep at least `MIN_HIDDEN` characters hidden
gets no fingerprint at all (the dashboard then shows the hash). The label is stored with the
statistics (sealed with `--encryption-key`) and shown only to the admin and the tenant itself.
"""

from __future__ import annotations

import re

VENDOR = re.compile(r"[a-z]{2,4}[-_]")  # sk-, gsk_, xai-
PRODUCT = re.compile(r"[a-z]{2,5}[-_]")  # after it: proj-, ant-, admin-
MAX_PREFIX = 8
TAIL = 4
MIN_HIDDEN = 16  # characters of the key neither in the prefix nor in the tail
MAX_SUB = 40  # characters of a sub-tenant (X-Offload-Tenant, the client's string) kept in a label
_printable = re.compile(r"[^\x21-\x7e]")


def key_fingerprint(key: str) -> str | None:
    """`sk-proj…AbCd` (the vendor prefix, if any, and the last 4 characters), or None for a key
    too short to show any of it."""
    prefix = ""
    if (vendor := VENDOR.match(key)) is not None:
        prefix = vendor.group(0)
        product = PRODUCT.match(key, len(prefix))
        if product is not None and len(prefix) + len(product.group(0)) <= MAX_PREFIX:
            prefix += product.group(0)
    if len(key) - len(prefix) - TAIL < MIN_HIDDEN:
        return None
    return f"{prefix.rstrip('-_')}…{_printable.sub('?', key[-TAIL:])}"


def credential_label(credentials: list[str], sub: str | None) -> str | None:
    """The label of a client-credential tenant: its key's fingerprint (the first of several
    keys, `+N` for the others), with the sub-tenant; None when no key has a fingerprint."""
    keys = sorted(set(credentials))
    prints = [p for k in keys if (p := key_fingerprint(k)) is not None]
    if not prints:
        return None
    label = prints[0] + (f" +{len(keys) - 1}" if len(keys) > 1 else "")
    return with_sub(label, sub)


def with_sub(label: str, sub: str | None) -> str:
    """`label/sub` (the sub-tenant clipped), or `label`."""
    return f"{label}/{_clip(sub)}" if sub else label


def _clip(text: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= MAX_SUB else text[: MAX_SUB - 1] + "…"
