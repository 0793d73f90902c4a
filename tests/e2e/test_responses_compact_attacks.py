"""The attack list on the emulated `POST /v1/responses/compact` and its tokens: a token used
by another credential, forged or bit-flipped, or whose record the store no longer holds; huge
inputs; every field with another JSON type. Each is a clear 4xx in OpenAI's shape, never a 500."""

from __future__ import annotations

import base64
import sqlite3
import uuid

import httpx2
import pytest

from proxy.core.compaction import PREFIX
from proxy.core.compression import USER_KEEP_CHARS
from tests.harness import responses as fake
from tests.harness.compaction import BUILD_HISTORY, BUILD_OUTPUT, continued
from tests.harness.compaction import assert_refused as refused
from tests.harness.requests import post
from tests.harness.servers import scripted

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

MODEL = "gpt-5"
BIG, HISTORY = BUILD_OUTPUT, BUILD_HISTORY


def new_key() -> str:
    return f"sk-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def model(upstream):
    upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message("Hello there")))


def token_of(url: str, key: str) -> str:
    r = post(url, "/v1/responses/compact", body={"model": MODEL, "input": HISTORY}, key=key)
    assert r.status_code == 200, r.text
    token = r.json()["output"][-1]["encrypted_content"]
    assert token.startswith(PREFIX)
    return token


def assert_refused(r: httpx2.Response, why: str) -> None:
    refused(r, why, param="input[0].encrypted_content")


@pytest.mark.parametrize("path", ["responses", "responses/compact"])
def test_another_credentials_token_is_refused(proxy_url, upstream, path):
    token = token_of(proxy_url, new_key())
    r = post(proxy_url, f"/v1/{path}", body=continued(token), key=new_key())
    assert_refused(r, "not issued to this credential")
    assert not upstream.responses_requests()


def flipped(token: str, at: int) -> str:
    body = token[len(PREFIX) :]
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[at] ^= 0x01
    return PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


@pytest.mark.parametrize(
    "forge",
    [
        lambda t: flipped(t, 0),
        lambda t: flipped(t, 31),
        lambda t: t + "AAAA",
        lambda t: PREFIX + "not base64 !!",
        lambda t: "offload-compaction-v9:abc",
        lambda t: PREFIX + "A" * 10_000,
    ],
)
@pytest.mark.parametrize("path", ["responses", "responses/compact"])
def test_a_forged_token_is_refused(proxy_url, upstream, forge, path):
    key = new_key()
    token = token_of(proxy_url, key)
    r = post(proxy_url, f"/v1/{path}", body=continued(forge(token)), key=key)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_compaction"
    assert not upstream.responses_requests()


def test_a_token_whose_record_expired_is_refused_clearly(make_proxy, upstream, tmp_path):
    key = new_key()
    with make_proxy(data_dir=tmp_path) as url:
        token = token_of(url, key)
        with sqlite3.connect(tmp_path / "offload.sqlite3") as db:
            deleted = db.execute("DELETE FROM kv WHERE key LIKE '%:compaction:%'").rowcount
        assert deleted == 1
        for path in ("responses", "responses/compact"):
            assert_refused(
                post(url, f"/v1/{path}", body=continued(token), key=key), "no longer holds what it stood for"
            )
    assert not upstream.responses_requests()


def test_ten_thousand_items_compact_without_failing(proxy_url, upstream):
    items = [
        {"type": "message", "role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
        for i in range(10_000)
    ]
    r = post(proxy_url, "/v1/responses/compact", body={"model": MODEL, "input": items}, key=new_key())
    assert r.status_code == 200, r.text
    output = r.json()["output"]
    assert output[0]["content"] == [{"type": "input_text", "text": "message 0"}]  # the task
    assert output[-1]["type"] == "compaction"
    later = [part["text"] for item in output[1:-1] for part in item["content"]]
    assert later and sum(map(len, later)) <= USER_KEEP_CHARS  # later user messages: the newest, within a budget
    assert later[-1] == "message 9998"


def test_more_items_than_the_limit_is_a_400(make_proxy, upstream):
    with make_proxy(max_messages=100) as url:
        r = post(
            url,
            "/v1/responses/compact",
            body={"model": MODEL, "input": [{"role": "user", "content": "x"}] * 101},
            key=new_key(),
        )
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_messages"


def test_a_50_mb_string_input_is_compacted(make_proxy, upstream):
    with make_proxy(max_body_bytes=60_000_000) as url:
        words = " ".join(f"w{i}" for i in range(1000))  # words: tiktoken's usual case
        text = " ".join([words] * 10_000)[:50_000_000]  # as " ".join(f"w{i % 1000}" for i in range(10**7)), 100x sooner
        r = post(url, "/v1/responses/compact", body={"model": MODEL, "input": text}, key=new_key())
    assert r.status_code == 200, r.text[:500]
    assert r.json()["output"][-1]["type"] == "compaction"  # the task alone: nothing to fold
    assert not upstream.summary_requests()


BAD_VALUES = [1, 1.5, True, None, [], {}, "s", [1], [[]], ["s"]]


@pytest.mark.parametrize("field", ["model", "input", "instructions", "previous_response_id"])
@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_every_field_with_another_json_type_is_a_400(proxy_url, upstream, field, value):
    body = {"model": MODEL, "input": HISTORY, field: value}
    r = post(proxy_url, "/v1/responses/compact", body=body, key=new_key())
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["param"], r.text
    expected_ok = (
        (value is None and field in ("instructions", "previous_response_id"))
        or (isinstance(value, str) and field in ("model", "input", "instructions"))
        or (field == "input" and value == [])
    )
    assert (r.status_code == 200) == expected_ok, (field, value, r.text)


@pytest.mark.parametrize(
    "item",
    [
        1,
        "s",
        None,
        [],
        {"type": "message", "role": 1, "content": "x"},
        {"type": "message", "role": "user", "content": 5},
        {"type": "function_call_output", "call_id": "c", "output": [1]},
        {"type": "compaction", "encrypted_content": 7},
    ],
)
def test_input_items_of_other_types_are_a_400(proxy_url, upstream, item):
    r = post(proxy_url, "/v1/responses/compact", body={"model": MODEL, "input": [item]}, key=new_key())
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith("input[0]")


@pytest.mark.parametrize("raw", [b"", b"[]", b"{", b'"x"', b"\xff\xfe", b"[" * 10_000 + b"]" * 10_000])
def test_bodies_that_are_not_a_json_object_are_a_400(proxy_url, upstream, raw):
    r = post(proxy_url, "/v1/responses/compact", body=raw, key=new_key())
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"


def test_previous_response_id_is_a_clear_400_when_emulating(proxy_url, upstream):
    r = post(proxy_url, "/v1/responses/compact", body={"model": MODEL, "previous_response_id": "resp_1"}, key=new_key())
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "previous_response_id" and "input" in r.json()["error"]["message"]
    assert not upstream.requests


def test_a_provider_token_is_refused_when_emulating(proxy_url, upstream):
    r = post(proxy_url, "/v1/responses/compact", body=continued("gAAAAABprovider-state=="), key=new_key())
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_compaction"
