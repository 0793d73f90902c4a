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


@pytest.mark.parametrize("token", [
    ct.PREFIX, ct.PREFIX + "!!!!", ct.PREFIX + "A" * 10, ct.PREFIX + "A" * 5000,
    ct.PREFIX + base64.urlsafe_b64encode(b"\0" * 40).decode(), "offload-compaction-v9:abc",
])
def test_malformed_and_unknown_versions_are_refused(token):
    assert ct.is_ours(token)
    with pytest.raises(ct.TokenError):
        ct.read_token(token, "ns", None)


def test_a_flipped_bit_is_refused():
    token = ct.make_token(ct.record_id_for("ns", b"x"), "ns")
    raw = bytearray(base64.urlsafe_b64decode(token[len(ct.PREFIX):] + "=="))
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
