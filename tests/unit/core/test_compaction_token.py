import base64

import pytest

from proxy.core import compaction_token as ct


def test_a_token_reads_back_in_its_namespace_only():
    rid = ct.record_id_for("ns-a", b"[1]")
    token = ct.make_token(rid, "ns-a", "secret")
    assert token.startswith(ct.PREFIX) and len(token) < 80
    assert ct.read_token(token, "ns-a", "secret") == rid.hex()
    with pytest.raises(ct.TokenError, match="not issued to this credential"):
        ct.read_token(token, "ns-b", "secret")
    with pytest.raises(ct.TokenError):
        ct.read_token(token, "ns-a", "another secret")


def test_the_same_content_gives_the_same_token_and_other_content_another():
    assert ct.record_id_for("ns", b"x") == ct.record_id_for("ns", b"x")
    assert ct.record_id_for("ns", b"x") != ct.record_id_for("ns", b"y")
    assert ct.record_id_for("ns", b"x") != ct.record_id_for("other", b"x")


@pytest.mark.parametrize(
    "token",
    [
        ct.PREFIX,
        ct.PREFIX + "!!!!",
        ct.PREFIX + "A" * 10,
        ct.PREFIX + "A" * 5000,
        ct.PREFIX + base64.urlsafe_b64encode(b"\0" * 40).decode(),
        "offload-compaction-v9:abc",
    ],
)
def test_malformed_and_unknown_versions_are_refused(token):
    assert ct.is_ours(token)
    with pytest.raises(ct.TokenError):
        ct.read_token(token, "ns", None)


def test_a_flipped_bit_is_refused():
    token = ct.make_token(ct.record_id_for("ns", b"x"), "ns")
    raw = bytearray(base64.urlsafe_b64decode(token[len(ct.PREFIX) :] + "=="))
    raw[3] ^= 1
    forged = ct.PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(ct.TokenError):
        ct.read_token(forged, "ns")


@pytest.mark.parametrize("value", [None, 1, [], {}, "gAAAAABfoo", ""])
def test_other_values_are_not_ours(value):
    assert not ct.is_ours(value)


def test_a_token_is_read_by_the_api_it_was_made_for_only():
    rid = ct.record_id_for("ns", b"[]")
    responses, messages = ct.make_token(rid, "ns", "s"), ct.make_token(rid, "ns", "s", api="messages")
    assert responses != messages
    assert ct.read_token(responses, "ns", "s") == ct.read_token(messages, "ns", "s", api="messages") == rid.hex()
    with pytest.raises(ct.TokenError, match="another API"):
        ct.read_token(messages, "ns", "s")
    with pytest.raises(ct.TokenError, match="another API"):
        ct.read_token(responses, "ns", "s", api="messages")
    with pytest.raises(ct.TokenError, match="not issued"):  # another namespace's, of either API
        ct.read_token(messages, "ns-b", "s", api="messages")


def _canonical() -> str:
    return ct.make_token(ct.record_id_for("ns", b"[1]"), "ns", "s")


@pytest.mark.parametrize(
    "spelling",
    [
        lambda t: t + "=",  # padding
        lambda t: t + "==",
        lambda t: t[:40] + "!!" + t[40:],  # characters outside the alphabet, skipped by a lenient decoder
        lambda t: t[:40] + "\n" + t[40:],  # whitespace inside
        lambda t: t + "\n",
        lambda t: " " + t,
        lambda t: t + " ",
        lambda t: ct.PREFIX + t[len(ct.PREFIX) :][:-2] + "+/",  # the standard alphabet's characters
        lambda t: t[:-1],  # a character short
        lambda t: t + "A",  # a character more
        lambda t: t.upper(),
        lambda t: ct.PREFIX.upper() + t[len(ct.PREFIX) :],
        lambda t: t[:-1] + chr(ord(t[-1]) ^ 1),  # the last character's unused bits set (same bytes, another spelling)
    ],
)
def test_only_the_canonical_spelling_is_read(spelling):
    token = _canonical()
    assert ct.read_token(token, "ns", "s")  # the token itself reads back
    other = spelling(token)
    assert other != token and ct.is_ours(other)
    with pytest.raises(ct.TokenError):
        ct.read_token(other, "ns", "s")


def test_the_unused_bits_of_the_last_character_are_checked():
    token = _canonical()
    body = token[len(ct.PREFIX) :]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(body[-1])
    assert last % 4 == 0  # 32 bytes in 43 characters: two bits to spare, written as zeros
    for spare in (1, 2, 3):
        same_bytes = ct.PREFIX + body[:-1] + alphabet[last + spare]
        assert base64.urlsafe_b64decode(same_bytes[len(ct.PREFIX) :] + "=") == base64.urlsafe_b64decode(body + "=")
        with pytest.raises(ct.TokenError, match="exact spelling"):
            ct.read_token(same_bytes, "ns", "s")


@pytest.mark.parametrize(
    "value", [" offload-compaction-v1:x", "OFFLOAD-COMPACTION-V1:x", "x" * 100 + "Offload-Compaction-v1"]
)
def test_any_spelling_claiming_to_be_ours_is_ours(value):
    assert ct.is_ours(value)


def test_sealed_fields_finds_a_token_in_any_encrypted_content_at_any_depth():
    token = _canonical()
    doc = {
        "input": [
            {"type": "message", "content": [{"type": "input_text", "text": token}]},
            {"type": "reasoning", "encrypted_content": token},
            {"type": "x", "deep": [[{"encrypted_content": " " + token}]]},
            {"type": "compaction", "encrypted_content": "gAAAAAprovider"},
        ]
    }
    assert list(ct.sealed_fields(doc)) == ["input[1].encrypted_content", "input[2].deep[0][0].encrypted_content"]
    deep: dict = {"encrypted_content": token}
    for _ in range(5000):  # no recursion limit
        deep = {"a": [deep]}
    assert len(list(ct.sealed_fields(deep))) == 1
    assert ct.may_hold_token(b'{"encrypted_content":"x"}') and not ct.may_hold_token(b'{"a":"offload-compaction-v1:"}')


def test_sealed_fields_finds_a_token_inside_an_encrypted_content_of_another_type():
    """An array or an object as the `encrypted_content` (no API's shape) hides no token of ours:
    each is named by its own path, which is no compaction position."""
    token = _canonical()
    doc = {
        "input": [
            {"type": "compaction", "encrypted_content": [token]},
            {"type": "reasoning", "encrypted_content": {"a": [1, {"b": token}], "c": "x"}},
            {"type": "compaction", "encrypted_content": [None, "gAAAA", 3, {"d": None}]},
            {"type": "x", "other": [token]},
        ]
    }
    assert list(ct.sealed_fields(doc)) == ["input[0].encrypted_content[0]", "input[1].encrypted_content.a[1].b"]


def test_sealed_fields_quotes_a_key_that_is_no_plain_name():
    """A key spelled like a path (`input[1]`, `a.b`) is named quoted: no path of one field is
    another's."""
    token = _canonical()
    doc = {"input[1]": {"encrypted_content": token}, "input": [{"x-y": {"encrypted_content": token}}]}
    assert sorted(ct.sealed_fields(doc)) == sorted(
        ['["input[1]"].encrypted_content', 'input[0]["x-y"].encrypted_content']
    )


@pytest.mark.parametrize(
    "raw, spells",
    [
        (b'{"input": "caf\\u00e9 \\u4e2d\\u6587"}', False),  # what ensure_ascii writes: no ASCII letter escaped
        (b'{"input": [{"\\u0065ncrypted_content": "x"}]}', True),  # the key spelled with an escape
        (b'{"input": "\\u0041"}', True),  # any printable ASCII escape is read (conservative)
        (b'{"input": "\\u001b[0m"}', False),  # a control character cannot spell the key
        (b'{"input": "plain"}', False),
        (b'{"input": "' + b"\\u00e9" * 300_000 + b'\\u0065"}', True),  # past the first slice
    ],
)
def test_which_escapes_may_spell_the_key(raw, spells):
    assert ct.escapes_ascii(raw) is spells
    assert ct.may_spell_token(raw) is spells
