"""On the operator's shared upstream key, every way of naming state stored in the upstream
account is refused (403 endpoint_not_shared) before anything is sent upstream: an input item
that is a reference without saying so, `responses/input_tokens` with a stored response or
conversation, files, vector stores, containers, stored prompts; and the managed endpoints are
reached (with their checks) whatever the spelling of their path."""

from __future__ import annotations

import httpx2
import pytest

from tests.e2e.test_responses_attacks import KEY_A, KEY_B, shared_key_tenants
from tests.harness.requests import post

RESPONSES_STATE = [
    ({"input": [{"id": "msg_OTHER"}]}, "input[0]"),
    ({"input": [{"type": None, "id": "msg_OTHER"}]}, "input[0]"),
    ({"input": [{"role": None, "id": "msg_OTHER"}]}, "input[0]"),  # a null role is no role: no message
    ({"input": [{"role": "user", "content": "hi"}, {"type": "item_reference", "id": "msg_OTHER"}]}, "input[1]"),
    ({"input": "hi", "previous_response_id": "resp_OTHER"}, "previous_response_id"),
    ({"input": "hi", "conversation": {"id": "conv_OTHER"}}, "conversation"),
    ({"input": "hi", "prompt": {"id": "pmpt_OTHER"}}, "prompt"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-OTHER"}]}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-OTHER"}]}]}, "input[0].content"),
    (
        {"input": "hi", "tools": [{"type": "file_search", "vector_store_ids": ["vs_OTHER"]}]},
        "tools[0].vector_store_ids",
    ),
    ({"input": "hi", "tools": [{"type": "code_interpreter", "container": "cntr_OTHER"}]}, "tools[0].container"),
]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses",
        "/v1/responses/",
        "/v1//responses",
        "/v1/responses//",
        "/v1/responses/input_tokens",
        "/v1/responses/input_tokens/",
    ],
)
def test_responses_state_is_refused_on_a_shared_key(make_proxy, upstream, tmp_path, path):
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        for fields, param in RESPONSES_STATE:
            r = post(url, path, body={"model": "gpt-5", **fields}, headers={"authorization": f"Bearer {KEY_B}"})
            assert r.status_code == 403, (path, fields, r.status_code, r.text[:200])
            error = r.json()["error"]
            assert (error["code"], error["param"]) == ("endpoint_not_shared", param), (path, fields, error)
        assert not upstream.requests, [(rec.path, rec.body[:80]) for rec in upstream.requests]
        r = post(
            url,
            path,
            body={"model": "gpt-5", "input": [{"role": "user", "content": "hello"}]},
            headers={"authorization": f"Bearer {KEY_B}"},
        )
        assert r.status_code == 200, (path, r.text[:200])


def test_without_a_shared_key_the_client_names_its_own_state(make_proxy, upstream):
    """The client's own key: its stored state is its own, relayed as sent."""
    with make_proxy() as url:
        upstream.requests.clear()
        r = post(
            url,
            "/v1/responses/input_tokens",
            body={"model": "gpt-5", "previous_response_id": "resp_1"},
            headers={"authorization": "Bearer sk-own-key-0001"},
        )
        assert r.status_code != 403, r.text[:200]
        assert any(rec.path.endswith("/responses/input_tokens") for rec in upstream.requests)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/chat/completions/", "/v1//chat//completions"])
def test_chat_files_are_refused_on_a_shared_key(make_proxy, upstream, tmp_path, path):
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        body = {
            "model": "gpt-4o",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "summarise"},
                        {"type": "file", "file": {"file_id": "file-OTHER"}},
                    ],
                }
            ],
        }
        r = post(url, path, body=body, headers={"authorization": f"Bearer {KEY_B}"})
        assert r.status_code == 403 and r.json()["error"]["param"] == "messages[0].content", r.text[:200]


def test_relayed_json_bodies_naming_files_are_refused_on_a_shared_key(make_proxy, upstream, tmp_path):
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        r = post(
            url,
            "/v1/images/edits",
            body={"model": "gpt-image-1", "prompt": "a cat", "images": [{"file_id": "file-OTHER"}]},
            headers={"authorization": f"Bearer {KEY_B}"},
        )
        assert r.status_code == 403 and r.json()["error"]["param"] == "images[0]", r.text[:200]
        r = httpx2.post(
            f"{url}/v1/responses/input_tokens",
            content=b'{"model": "gpt-5", "previous_response_id"',
            headers={"authorization": f"Bearer {KEY_A}", "content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json", r.text[:200]
        assert not upstream.requests
        # a legacy completion's prompt is text, not a stored prompt
        r = post(
            url,
            "/v1/completions",
            body={"model": "gpt-3.5-turbo-instruct", "prompt": "Say hi"},
            headers={"authorization": f"Bearer {KEY_B}"},
        )
        assert r.status_code != 403, r.text[:200]


@pytest.mark.parametrize("spelling", ["bom", "utf-16", "utf-32"])
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_relayed_body_that_is_json_in_another_spelling_is_read_for_stored_state(
    make_proxy, upstream, tmp_path, spelling, content_type
):
    """A JSON body behind a byte order mark, or in UTF-16/32 (which a JSON parser reading bytes may
    take), sent without a JSON content type, is not relayed unread on the shared key."""
    import orjson

    text = orjson.dumps({"model": "gpt-5", "input": "hi", "previous_response_id": "resp_OTHER"}).decode()
    raw = {"bom": b"\xef\xbb\xbf" + text.encode(), "utf-16": text.encode("utf-16"), "utf-32": text.encode("utf-32")}[
        spelling
    ]
    headers = {"authorization": f"Bearer {KEY_A}"} | ({"content-type": content_type} if content_type else {})
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        r = httpx2.post(f"{url}/v1/responses/input_tokens", content=raw, headers=headers)
        assert r.status_code in (400, 403), (r.status_code, r.text[:200])
        assert r.json()["error"]["code"] in ("endpoint_not_shared", "invalid_json"), r.text[:200]
        assert not upstream.requests, [(rec.path, rec.body[:80]) for rec in upstream.requests]


def test_a_relayed_multipart_upload_goes_as_sent_on_a_shared_key(make_proxy, upstream, tmp_path):
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        r = httpx2.post(
            f"{url}/v1/audio/transcriptions",
            data={"model": "whisper-1"},
            files={"file": ("a.wav", b"RIFF....WAVE", "audio/wav")},
            headers={"authorization": f"Bearer {KEY_A}"},
        )
        assert r.status_code < 400, r.text[:200]
        [sent] = upstream.requests
        assert b"whisper-1" in sent.body


ANTHROPIC_STATE = [
    ({"container": "container_OTHER"}, "container"),
    (
        {
            "messages": [
                {"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": "file_OTHER"}}]}
            ]
        },
        "messages[0].content",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "image", "source": {"type": "file", "file_id": "file_OTHER"}}],
                        }
                    ],
                }
            ]
        },
        "messages[0].content",
    ),
]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/", "/v1//messages", "/v1/messages/count_tokens/"])
def test_anthropic_state_is_refused_on_a_shared_key(make_proxy, upstream, tmp_path, path):
    with make_proxy(anthropic_api_key="sk-ant-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        for fields, param in ANTHROPIC_STATE:
            body = {
                "model": "claude-sonnet-4",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "hi"}],
                **fields,
            }
            r = post(
                url,
                path,
                body=body,
                headers={"authorization": f"Bearer {KEY_A}", **{"anthropic-version": "2023-06-01"}},
            )
            assert r.status_code == 403, (path, fields, r.text[:200])
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "permission_error", r.text[:200]
        assert not upstream.requests


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_a_compressed_relayed_body_is_read_for_stored_state(make_proxy, upstream, tmp_path, coding):
    """The check reads the body through its Content-Encoding; a clean one goes up as read."""
    import gzip

    import brotli
    import orjson
    import zstandard

    compress = {"gzip": gzip.compress, "br": brotli.compress, "zstd": zstandard.ZstdCompressor().compress}[coding]
    headers = {"authorization": f"Bearer {KEY_A}", "content-type": "application/json", "content-encoding": coding}
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        bad = compress(orjson.dumps({"model": "gpt-5", "previous_response_id": "resp_OTHER"}))
        r = httpx2.post(f"{url}/v1/responses/input_tokens", content=bad, headers=headers)
        assert r.status_code == 403 and r.json()["error"]["param"] == "previous_response_id", r.text[:200]
        assert not upstream.requests
        good = compress(orjson.dumps({"model": "gpt-5", "input": "hi"}))
        httpx2.post(f"{url}/v1/responses/input_tokens", content=good, headers=headers)
        [sent] = upstream.requests  # the object the check read, decoded and re-serialised
        assert orjson.loads(sent.body) == {"model": "gpt-5", "input": "hi"}
        assert sent.headers.get("content-encoding") is None


@pytest.mark.parametrize(
    ("path", "family"),
    [
        ("/v1/responses", "openai"),
        ("/v1/responses/input_tokens", "openai"),
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "anthropic"),
    ],
)
def test_a_duplicate_key_never_shows_the_upstream_another_value(make_proxy, upstream, tmp_path, path, family):
    """The proxy reads the last of two duplicate keys; the upstream gets the object it read."""
    options = {"anthropic_api_key": "sk-ant-server"} if family == "anthropic" else {"upstream_api_key": "sk-server"}
    field = "container" if family == "anthropic" else "previous_response_id"
    body = (
        b'{"model": "m", "max_tokens": 5, "' + field.encode() + b'": "OTHER", "' + field.encode() + b'": null, '
        b'"input": "hi", "messages": [{"role": "user", "content": "hi"}]}'
    )
    headers = {
        "authorization": f"Bearer {KEY_A}",
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
    }
    with make_proxy(tenants_file=shared_key_tenants(tmp_path), **options) as url:
        upstream.requests.clear()
        r = httpx2.post(f"{url}{path}", content=body, headers=headers)
        assert r.status_code == 200, r.text[:200]
        [sent] = upstream.requests
        assert b"OTHER" not in sent.body and sent.body.count(field.encode()) <= 1, sent.body[:300]


CONTENT_TYPES = [
    "multipart/form-data; boundary=xyz",
    "multipart/form-data",
    "text/plain",
    None,
    "application/x-www-form-urlencoded",
]
SHARED_ROUTES = [  # (path, family, relay header): managed and relayed routes taking a JSON body
    ("/v1/responses/input_tokens", "openai", False),
    ("/v1/responses/compact", "openai", True),
    ("/v1/responses", "openai", False),
    ("/v1/chat/completions", "openai", False),
    ("/v1/embeddings", "openai", False),
    ("/v1/messages", "anthropic", False),
    ("/v1/messages/count_tokens", "anthropic", False),
]


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
def test_a_json_body_is_read_for_stored_state_whatever_its_content_type(make_proxy, upstream, tmp_path, content_type):
    """A JSON body labelled multipart/form-data (or text/plain, or nothing) is still JSON to an
    upstream that reads it: on the shared key it is checked like any other."""
    import orjson

    with make_proxy(
        upstream_api_key="sk-server", anthropic_api_key="sk-ant-server", tenants_file=shared_key_tenants(tmp_path)
    ) as url:
        upstream.requests.clear()
        for path, family, relay in SHARED_ROUTES:
            field = "container" if family == "anthropic" else "previous_response_id"
            body = {
                "model": "m",
                "max_tokens": 5,
                "input": "hi",
                "messages": [{"role": "user", "content": "hi"}],
                field: "OTHER",
            }
            headers = {"authorization": f"Bearer {KEY_A}", "anthropic-version": "2023-06-01"}
            headers |= {"content-type": content_type} if content_type else {}
            headers |= {"X-Offload-Context-Management": "relay"} if relay else {}
            for raw in (orjson.dumps(body), b"\xef\xbb\xbf \n" + orjson.dumps(body)):
                r = httpx2.post(f"{url}{path}", content=raw, headers=headers)
                assert r.status_code == 403, (path, content_type, r.status_code, r.text[:200])
            # JSON that cannot be read is refused, not relayed unread
            r = httpx2.post(f"{url}{path}", content=b'{"' + field.encode() + b'": "OTHER",', headers=headers)
            assert r.status_code == 400, (path, content_type, r.status_code, r.text[:200])
        assert not upstream.requests, [(rec.path, rec.body[:80]) for rec in upstream.requests]


def test_a_real_multipart_upload_goes_unchanged_even_naming_a_field(make_proxy, upstream, tmp_path):
    """A real upload (its bytes open with the boundary) is no JSON: relayed byte for byte."""
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        request = httpx2.Request(
            "POST",
            f"{url}/v1/audio/transcriptions",
            data={"model": "whisper-1", "previous_response_id": "x"},
            files={"file": ("a.json", b'{"previous_response_id": "resp_OTHER"}', "text/json")},
            headers={"authorization": f"Bearer {KEY_A}"},
        )
        raw = request.read()
        r = httpx2.Client().send(request)
        assert r.status_code < 400, r.text[:200]
        [sent] = upstream.requests
        assert sent.body == raw and sent.headers["content-type"].startswith("multipart/form-data")


@pytest.mark.parametrize(
    "path",
    ["/v1/responses/input_tokens", "/v1/responses/compact", "/v1/completions", "/v1/embeddings", "/v1/moderations"],
)
def test_a_multipart_upload_to_a_json_endpoint_is_refused_on_a_shared_key(make_proxy, upstream, tmp_path, path):
    """Only the audio and image endpoints take an upload: on any other relayed endpoint a real
    multipart body (its form fields never read by the proxy, `previous_response_id` among them)
    is a 400, not relayed unread."""
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        upstream.requests.clear()
        r = httpx2.post(
            f"{url}{path}",
            data={"model": "gpt-5", "previous_response_id": "resp_OTHER"},
            files={"file": ("a.txt", b"x", "text/plain")},
            headers={"authorization": f"Bearer {KEY_A}"},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json", r.text[:200]
        assert not upstream.requests, [(rec.path, rec.body[:80]) for rec in upstream.requests]
