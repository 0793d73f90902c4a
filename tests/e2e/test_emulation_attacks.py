"""The attack list on the emulation of the providers' context management (issue 22, part 2),
beyond `test_responses_compact_attacks.py`: whose content each token can open (proxy keys and
their sub-tenants, anonymous callers, clients' own keys; a guessed record id; with and without
--encryption-key; on the embedded store and on a real Redis), tokens moved between the two
APIs, relay/emulate switched mid-session, what reaches the upstream, lists and values sized to
stall the worker (with /healthz answering meanwhile), and an upstream that fails mid-turn."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import httpx2
import pytest
from starlette.datastructures import Headers

from proxy.core import compaction
from proxy.core.compaction import PREFIX, is_ours
from proxy.http.caller import Gatekeeper
from tests.harness import anthropic as afake
from tests.harness import responses as fake
from tests.harness.compaction import BUILD_HISTORY, BUILD_OUTPUT, assert_refused, continued
from tests.harness.requests import post
from tests.harness.servers import scripted

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

MODEL, CLAUDE = "gpt-5", "claude-sonnet-4-5"
BIG, HISTORY = BUILD_OUTPUT, BUILD_HISTORY
KEY_A, KEY_B = "pk-tenant-a-0123456789abcdef", "pk-tenant-b-0123456789abcdef"
TENANTS = f'[tenants.a]\napi_keys = ["{KEY_A}"]\n[tenants.b]\napi_keys = ["{KEY_B}"]\n'


def words(label: str, n: int) -> str:
    return f"{label}: " + " ".join(f"{label}w{k}" for k in range(n))


MESSAGES = [
    {"role": "user", "content": "the task: fix the build"},
    *[
        {"role": "assistant", "content": words(f"a{k}", 300)}
        if k % 2 == 0
        else {"role": "user", "content": f"u{k}: go on"}
        for k in range(8)
    ],
    {"role": "user", "content": "and now?"},
]
COMPACT_EDIT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1000}}]}


def new_key() -> str:
    return f"sk-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def answers(upstream):
    def answer(rec):
        if afake.is_messages_create(rec):
            return afake.answer(rec, afake.message(afake.text("Done.")))
        return fake.answer(rec, fake.message("Hello there"))

    upstream.handler = scripted(answer)


def token_of(url: str, key: str | None, **headers: str) -> str:
    r = post(url, "/v1/responses/compact", body={"model": MODEL, "input": HISTORY}, key=key, headers={**headers})
    assert r.status_code == 200, r.text
    token = r.json()["output"][-1]["encrypted_content"]
    assert token.startswith(PREFIX)
    return token


def block_of(url: str, key: str, **headers: str) -> dict:
    """An Anthropic compaction block the proxy made (threshold compaction, paused)."""
    edit = {"edits": [{**COMPACT_EDIT["edits"][0], "pause_after_compaction": True}]}
    r = post(
        url,
        "/v1/messages",
        body={"model": CLAUDE, "max_tokens": 512, "messages": MESSAGES, "context_management": edit},
        key=key,
        headers={**headers},
    )
    assert r.status_code == 200, r.text
    block = r.json()["content"][0]
    assert block["type"] == "compaction" and is_ours(block["encrypted_content"])
    return block


def forwarded_bytes(upstream) -> bytes:
    return b"".join(r.body for r in upstream.requests)


# ---------------------------------------------------------------- whose content a token opens

STORES = ["embedded", "redis"]


@pytest.fixture(
    params=[(s, k) for s in STORES for k in (None, "correct horse battery staple")],
    ids=lambda p: f"{p[0]}-{'key' if p[1] else 'nokey'}",
)
def store_options(request, tmp_path) -> dict:
    backend, secret = request.param
    options: dict = {"data_dir": tmp_path}
    if backend == "redis":
        options["redis_url"] = request.getfixturevalue("redis_url")
    if secret:
        options["encryption_key"] = secret
    return options


def test_tokens_are_bound_to_tenant_sub_tenant_and_caller_kind(make_proxy, upstream, tmp_path, store_options):
    """Proxy keys (tenants file + --upstream-api-key): another tenant, a sub-tenant of the same
    tenant, the tenant without the sub-tenant it used, an anonymous caller: none opens the token."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS)
    with make_proxy(
        tenants_file=tenants, upstream_api_key="sk-operator-0123456789", allow_anonymous=True, **store_options
    ) as url:
        a = token_of(url, KEY_A)
        a_sub = token_of(url, KEY_A, **{"X-Offload-Tenant": "alice"})
        anon = token_of(url, None)
        for path in ("responses", "responses/compact"):
            assert post(url, f"/v1/{path}", body=continued(a), key=KEY_A).status_code == 200  # its own: fine
            assert_refused(post(url, f"/v1/{path}", body=continued(a), key=KEY_B), "not issued to this credential")
            assert_refused(
                post(url, f"/v1/{path}", body=continued(a), key=KEY_A, headers={**{"X-Offload-Tenant": "alice"}}),
                "not issued",
            )
            assert_refused(post(url, f"/v1/{path}", body=continued(a_sub), key=KEY_A), "not issued")
            assert_refused(
                post(url, f"/v1/{path}", body=continued(a_sub), key=KEY_A, headers={**{"X-Offload-Tenant": "bob"}}),
                "not issued",
            )
            assert_refused(post(url, f"/v1/{path}", body=continued(a), key=None), "not issued")
            assert_refused(post(url, f"/v1/{path}", body=continued(anon), key=KEY_A), "not issued")
            assert_refused(
                post(url, f"/v1/{path}", body=continued(anon), key=None, headers={**{"X-Offload-Tenant": "x"}}),
                "not issued",
            )
    sent = forwarded_bytes(upstream)
    assert PREFIX.encode() not in sent and b"pk-tenant" not in sent


def test_clients_own_keys_and_a_guessed_record_id(make_proxy, upstream, store_options):
    """Without a server secret the tag's key is public, so B can mint a well-formed token naming
    A's record id: it still opens nothing, the record is looked up in B's namespace only."""
    with make_proxy(**store_options) as url:
        key_a, key_b = new_key(), new_key()
        token = token_of(url, key_a)
        assert_refused(post(url, "/v1/responses", body=continued(token), key=key_b), "not issued")
        secret = store_options.get("encryption_key")
        record_id = compaction.read_token(token, _namespace(key_a, secret), secret)
        minted = compaction.make_token(bytes.fromhex(record_id), _namespace(key_b, secret), secret)
        r = post(url, "/v1/responses", body=continued(minted), key=key_b)
        assert_refused(r, "no longer holds what it stood for")
        assert not [r for r in upstream.requests if key_b in r.headers.get("authorization", "")]


def _namespace(key: str, secret: str | None) -> str:
    """The namespace a proxy with `secret` gives a client's own `key` (as its Gatekeeper decides)."""
    gate = Gatekeeper({}, server_key=None, allow_anonymous=False, upstream_allowlist=[], secret=secret)
    return gate.identify(Headers({"authorization": f"Bearer {key}"})).namespace


# ---------------------------------------------------------------- tokens moved between the two APIs


def test_a_responses_token_in_an_anthropic_block_is_refused(proxy_url, upstream):
    key = new_key()
    token = token_of(proxy_url, key)
    block = {"type": "compaction", "content": "summary", "encrypted_content": token}
    body = {"messages": [{"role": "assistant", "content": [block]}, {"role": "user", "content": "next"}]}
    for path in ("messages", "messages/count_tokens"):
        for mode in ("emulate", "relay"):
            r = post(
                proxy_url,
                f"/v1/{path}",
                body={"model": CLAUDE, "max_tokens": 512, **body},
                key=key,
                headers={**{"X-Offload-Context-Management": mode}},
            )
            assert r.status_code == 400, r.text
            assert r.json()["type"] == "error" and "another API" in r.json()["error"]["message"], r.text
    assert PREFIX.encode() not in forwarded_bytes(upstream)


def test_an_anthropic_token_in_a_responses_item_is_refused(proxy_url, upstream):
    key = new_key()
    block = block_of(proxy_url, key)
    upstream.requests.clear()
    for path in ("responses", "responses/compact"):
        for mode in ("emulate", "relay"):
            r = post(
                proxy_url,
                f"/v1/{path}",
                body=continued(block["encrypted_content"]),
                key=key,
                headers={**{"X-Offload-Context-Management": mode}},
            )
            assert_refused(r, "another API")
    assert not upstream.requests


# ---------------------------------------------------------------- relay and emulate, switched mid-session


def test_a_token_made_emulating_is_expanded_when_relayed(proxy_url, upstream):
    """Switched to a native upstream (relay) later, a token of the proxy's never leaves it: the
    native upstream gets what it stands for (the summary with its ref=), on every endpoint."""
    key = new_key()
    token = token_of(proxy_url, key)
    block = block_of(proxy_url, key)
    upstream.requests.clear()
    relay = {"X-Offload-Context-Management": "relay"}
    assert post(proxy_url, "/v1/responses", body=continued(token), key=key, headers={**relay}).status_code == 200
    assert (
        post(proxy_url, "/v1/responses/compact", body=continued(token), key=key, headers={**relay}).status_code == 200
    )
    assert (
        post(proxy_url, "/v1/responses/input_tokens", body=continued(token), key=key, headers={**relay}).status_code
        == 200
    )
    body = {"messages": [{"role": "assistant", "content": [block]}, {"role": "user", "content": "next"}]}
    assert (
        post(
            proxy_url, "/v1/messages", body={"model": CLAUDE, "max_tokens": 512, **body}, key=key, headers={**relay}
        ).status_code
        == 200
    )
    assert (
        post(
            proxy_url,
            "/v1/messages/count_tokens",
            body={"model": CLAUDE, "max_tokens": 512, **body},
            key=key,
            headers={**relay},
        ).status_code
        == 200
    )
    paths = [r.path for r in upstream.requests]
    assert paths == [
        "/v1/responses",
        "/v1/responses/compact",
        "/v1/responses/input_tokens",
        "/v1/messages",
        "/v1/messages/count_tokens",
    ], paths
    for rec in upstream.requests:
        assert PREFIX.encode() not in rec.body, rec.path
        assert b"ref=" in rec.body, rec.path  # the summary the token stood for


def test_input_tokens_without_a_token_is_relayed_byte_for_byte_and_a_foreign_token_refused(proxy_url, upstream):
    key = new_key()
    raw = b'{"model":"m",  "input":[{"role":"user","content":"hi"}]}'
    r = httpx2.post(
        f"{proxy_url}/v1/responses/input_tokens",
        content=raw,
        timeout=30,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert r.status_code == 200 and upstream.requests[-1].body == raw
    theirs = token_of(proxy_url, new_key())
    upstream.requests.clear()
    r = post(proxy_url, "/v1/responses/input_tokens", body=continued(theirs), key=key)
    assert_refused(r, "not issued to this credential")
    assert not upstream.requests


# ---------------------------------------------------------------- what reaches an emulated upstream


def test_an_emulated_upstream_gets_no_context_management_beta_or_offload_header(proxy_url, upstream):
    key = new_key()
    headers = {
        "X-Offload-Context-Management": "emulate",
        "X-Offload-Session": "s1",
        "anthropic-beta": "compact-2026-01-12,context-management-2025-06-27,files-api-2025-04-14",
    }
    body = {
        "messages": MESSAGES,
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}, COMPACT_EDIT["edits"][0]]},
        "stream": True,
    }
    r = post(proxy_url, "/v1/messages", body={"model": CLAUDE, "max_tokens": 512, **body}, key=key, headers={**headers})
    assert r.status_code == 200, r.text
    r = post(
        proxy_url,
        "/v1/responses",
        body={
            "model": MODEL,
            "input": MESSAGES,
            "context_management": [{"type": "compaction", "compact_threshold": 1000}],
        },
        key=key,
        headers={**headers},
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["type"] == "compaction"
    turns = upstream.messages_requests() + upstream.responses_requests()
    assert len(turns) == 2
    for rec in upstream.requests:
        assert b"context_management" not in rec.body and PREFIX.encode() not in rec.body
        assert not [k for k, _ in rec.header_list if k.startswith("x-offload")], rec.header_list
        assert rec.headers.get("anthropic-beta") in (None, "files-api-2025-04-14"), rec.headers


def _stored(data_dir) -> dict[str, int]:
    """What an embedded store holds: the bytes the quota counted, of the refs' originals, of the
    compaction records."""
    import sqlite3

    with sqlite3.connect(data_dir / "offload.sqlite3") as db:
        rows = db.execute("SELECT key, value FROM kv").fetchall()
    return {
        "used": sum(int(v) for k, v in rows if k.endswith(":usage:bytes")),
        "items": sum(len(v) for k, v in rows if ":item:" in k),
        "records": sum(len(v) for k, v in rows if ":compaction:" in k),
    }


def test_an_inline_compactions_record_is_charged_to_the_quota(make_proxy, upstream, tmp_path):
    """What a threshold compaction's token stands for is stored content like any offload: counted
    in the tenant's storage quota (and refused for a credential the upstream does not accept)."""
    with make_proxy(data_dir=tmp_path / "1", max_stored_bytes_per_namespace=10**9) as url:
        block_of(url, new_key())
    stored = _stored(tmp_path / "1")
    assert stored["records"] and stored["used"] == stored["items"] + stored["records"], stored
    edit = {"edits": [{**COMPACT_EDIT["edits"][0], "pause_after_compaction": True}]}
    with make_proxy(data_dir=tmp_path / "2", max_stored_bytes_per_namespace=stored["used"] - 1) as url:
        r = post(
            url,
            "/v1/messages",
            body={"model": CLAUDE, "max_tokens": 512, "messages": MESSAGES, "context_management": edit},
            key=new_key(),
        )
    assert r.status_code == 200, r.text
    assert [b["type"] for b in r.json()["content"]] == ["text"]  # no compaction standing for nothing: a turn
    assert "quota" in r.headers.get("x-offload-warning", ""), r.headers
    assert _stored(tmp_path / "2")["records"] == 0


# ---------------------------------------------------------------- sized to stall the worker


class HealthWatch:
    """Polls /healthz while a request runs: the slowest answer tells whether the event loop stalled
    (printed for the record, never asserted: no timing assertions)."""

    def __init__(self, url: str) -> None:
        self.url, self.worst, self.stop = url, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx2.Client(timeout=60) as c:
            while not self.stop.is_set():
                start = time.monotonic()
                assert c.get(f"{self.url}/healthz").status_code == 200
                self.worst = max(self.worst, time.monotonic() - start)
                time.sleep(0.02)

    def __enter__(self) -> "HealthWatch":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def watched(url: str, label: str, send) -> httpx2.Response:
    with HealthWatch(url) as watch:
        start = time.monotonic()
        r = send()
        took = time.monotonic() - start
    print(f"\n[attack] {label}: {r.status_code} in {took:.2f}s, /healthz worst {watch.worst * 1000:.0f} ms")
    return r


def test_twenty_thousand_of_the_proxys_compaction_items_before_a_foreign_one_relayed(proxy_url, upstream):
    key = new_key()
    token = token_of(proxy_url, key)
    ours = {"type": "compaction", "encrypted_content": token}
    items = [ours] * 19_990 + [
        {"type": "compaction", "encrypted_content": "gAAAAABforeign=="},
        {"type": "message", "role": "user", "content": "next"},
    ]
    upstream.requests.clear()
    r = watched(
        proxy_url,
        "19,990 own tokens + a foreign one, relay",
        lambda: post(
            proxy_url,
            "/v1/responses",
            body={"model": MODEL, "input": items, "store": False},
            key=key,
            headers={**{"X-Offload-Context-Management": "relay"}},
        ),
    )
    assert r.status_code == 200, r.text[:300]
    (sent,) = upstream.responses_requests()
    assert PREFIX.encode() not in sent.body and len(sent.json()["input"]) == 2  # the foreign item, the message


def test_ten_thousand_compaction_blocks(proxy_url, upstream):
    key = new_key()
    block = block_of(proxy_url, key)
    messages = [{"role": "assistant", "content": [block]}] * 10_000 + [{"role": "user", "content": "next"}]
    r = watched(
        proxy_url,
        "10,000 compaction blocks",
        lambda: post(
            proxy_url, "/v1/messages", body={"model": CLAUDE, "max_tokens": 512, "messages": messages}, key=key
        ),
    )
    assert r.status_code == 200, r.text[:300]


def clear_over(n: int) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": "go"}]
    for i in range(n):
        out.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": f"t{i % 7}", "input": {"i": i}}],
            }
        )
        out.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"result {i} " * 100}],
            }
        )
    return out


def test_a_clear_edit_over_ten_thousand_tool_uses(proxy_url, upstream):
    """Ten thousand tool uses (20,000 messages: the default --max-messages was 20,000)."""
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 1000},
        "keep": {"type": "tool_uses", "value": 1},
        "exclude_tools": [f"x{i}" for i in range(1000)],
        "clear_tool_inputs": True,
    }
    body = {"messages": clear_over(9_999), "context_management": {"edits": [edit]}}
    r = watched(
        proxy_url,
        "clear_tool_uses over 9,999 tool uses",
        lambda: post(proxy_url, "/v1/messages", body={"model": CLAUDE, "max_tokens": 512, **body}, key=new_key()),
    )
    assert r.status_code == 200, r.text[:300]
    (applied,) = r.json()["context_management"]["applied_edits"]
    assert applied["cleared_tool_uses"] == 9_998


def test_thinking_blocks_galore(proxy_url, upstream):
    messages: list[dict] = []
    for t in range(5_000):
        messages.append({"role": "user", "content": f"q{t}"})
        messages.append(
            {
                "role": "assistant",
                "content": [
                    *({"type": "thinking", "thinking": f"thought {t}.{k}", "signature": "sig"} for k in range(20)),
                    {"type": "text", "text": f"a{t}"},
                ],
            }
        )
    messages.append({"role": "user", "content": "last"})
    body = {
        "messages": messages,
        "context_management": {
            "edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]
        },
    }
    r = watched(
        proxy_url,
        "clear_thinking over 100,000 thinking blocks",
        lambda: post(proxy_url, "/v1/messages", body={"model": CLAUDE, "max_tokens": 512, **body}, key=new_key()),
    )
    assert r.status_code == 200, r.text[:300]
    (applied,) = r.json()["context_management"]["applied_edits"]
    assert applied["cleared_thinking_turns"] == 4_999


@pytest.mark.parametrize(
    "body",
    [
        {
            "context_management": {
                "edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": [f"t{i}" for i in range(100_000)]}]
            }
        },
        {"context_management": {"edits": [{"type": "clear_thinking_20251015"}] * 10_000}},
        {
            "context_management": {
                "edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 10**30}}]
            }
        },
        {"context_management": {"edits": [{"type": "clear_thinking_20251015"}], "x": [[[[[[[[[[[[[[]]]]]]]]]]]]]]}},
    ],
    ids=["100k-exclude_tools", "10k-edits", "huge-trigger", "unknown-nested-field"],
)
def test_oversized_edits_are_a_400_before_any_is_read(proxy_url, upstream, body):
    r = watched(
        proxy_url,
        "oversized edits",
        lambda: post(
            proxy_url,
            "/v1/messages",
            body={"model": CLAUDE, "max_tokens": 512, "messages": MESSAGES, **body},
            key=new_key(),
        ),
    )
    assert r.status_code == 400 and r.json()["type"] == "error", r.text[:300]
    assert not upstream.requests


def test_ten_thousand_context_management_entries_and_a_huge_threshold(proxy_url, upstream):
    key = new_key()
    r = post(
        proxy_url,
        "/v1/responses",
        body={
            "model": MODEL,
            "input": "hi",
            "context_management": [{"type": "compaction", "compact_threshold": 1000}] * 10_000,
        },
        key=key,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "context_management", r.text[:300]
    r = post(
        proxy_url,
        "/v1/responses",
        body={
            "model": MODEL,
            "input": MESSAGES,
            "context_management": [{"type": "compaction", "compact_threshold": 10**300}],
        },
        key=key,
    )
    assert r.status_code == 400 and "compact_threshold" in r.json()["error"]["param"], r.text[:300]


# ---------------------------------------------------------------- every new field, every JSON type

TYPES = [None, True, 1.5, 10**40, "s", ["s"], {"k": 1}, [[[]]]]


def _ok_or_400(r: httpx2.Response, shape: str) -> None:
    assert r.status_code in (200, 400), r.text[:300]
    if r.status_code == 400:
        body = r.json()
        error = body["error"] if shape == "openai" else body["error"]
        assert shape == "openai" or body["type"] == "error", r.text[:300]
        assert error["message"] and "Traceback" not in r.text


RESPONSES_FIELDS = [
    lambda v: {"context_management": v},
    lambda v: {"context_management": [v]},
    lambda v: {"context_management": [{"type": v}]},
    lambda v: {"context_management": [{"type": "compaction", "compact_threshold": v}]},
    lambda v: {"input": [{"type": "compaction", "encrypted_content": v}, {"role": "user", "content": "x"}]},
    lambda v: {"input": [{"type": "compaction", "id": v, "encrypted_content": "gAAAA=="}]},
]
MESSAGES_FIELDS = [
    lambda v: {"context_management": v},
    lambda v: {"context_management": {"edits": v}},
    lambda v: {"context_management": {"edits": [v]}},
    *[
        lambda v, f=f, t=t: {"context_management": {"edits": [{"type": t, f: v}]}}
        for t, fields in (
            ("clear_tool_uses_20250919", ("trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs")),
            ("clear_thinking_20251015", ("keep",)),
            ("compact_20260112", ("trigger", "pause_after_compaction", "instructions")),
        )
        for f in fields
    ],
    lambda v: {
        "context_management": {
            "edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": v}}]
        }
    },
    lambda v: {
        "context_management": {
            "edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": v}}]
        }
    },
    lambda v: {
        "context_management": {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": v}}]}
    },
    *[
        lambda v, f=f: {
            "messages": [
                {"role": "assistant", "content": [{"type": "compaction", f: v}]},
                {"role": "user", "content": "x"},
            ]
        }
        for f in ("content", "encrypted_content", "cache_control")
    ],
]


@pytest.mark.parametrize("field", range(len(RESPONSES_FIELDS)))
def test_every_responses_field_of_every_json_type(proxy_url, upstream, field, caplog):
    key = new_key()
    for value in TYPES:
        body = {"model": MODEL, "input": MESSAGES, **RESPONSES_FIELDS[field](value)}
        for path in ("responses", "responses/compact"):
            _ok_or_400(post(proxy_url, f"/v1/{path}", body=body, key=key), "openai")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("field", range(len(MESSAGES_FIELDS)))
def test_every_messages_field_of_every_json_type(proxy_url, upstream, field, caplog):
    key = new_key()
    for value in TYPES:
        body = {"messages": MESSAGES, **MESSAGES_FIELDS[field](value)}
        for path in ("messages", "messages/count_tokens"):
            _ok_or_400(
                post(proxy_url, f"/v1/{path}", body={"model": CLAUDE, "max_tokens": 512, **body}, key=key), "anthropic"
            )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("value", ["", "x", "EMULATE", "relay,emulate", "r elay", "a" * 5000])
def test_a_bad_context_management_header_is_a_400(proxy_url, upstream, value):
    for path in ("responses", "responses/compact"):
        r = httpx2.post(
            f"{proxy_url}/v1/{path}",
            json={"model": MODEL, "input": "hi"},
            timeout=30,
            headers={
                "Authorization": f"Bearer {new_key()}",
                "X-Offload-Context-Management": value.encode().decode("latin-1"),
            },
        )
        assert r.status_code in (200, 400), r.text
        if value.strip().lower() not in ("relay", "emulate", "auto", ""):
            assert r.status_code == 400 and "Context-Management" in r.text, (value, r.text)


# ---------------------------------------------------------------- an upstream or summariser failing mid-turn

THRESHOLD = [{"type": "compaction", "compact_threshold": 1000}]


def _summary_or(turn):
    from tests.harness.servers import default_handler, is_summary_call, snapshot_answer

    async def handler(request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec)
        if rec.method != "POST":  # the credential check's GET models
            return await default_handler(request, rec)
        return turn(rec)

    return handler


def threshold_turn(url: str, api: str, *, stream: bool = False) -> httpx2.Response:
    """A turn over its threshold compaction, in `api`'s own terms (Responses or Messages)."""
    if api == "responses":
        return post(
            url,
            "/v1/responses",
            body={"model": MODEL, "input": MESSAGES, "context_management": THRESHOLD, "stream": stream},
            key=new_key(),
        )
    return post(
        url,
        "/v1/messages",
        body={
            "model": CLAUDE,
            "max_tokens": 512,
            "messages": MESSAGES,
            "context_management": COMPACT_EDIT,
            "stream": stream,
        },
        key=new_key(),
    )


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_the_upstream_answers_an_error_after_the_compaction_was_made(proxy_url, upstream, stream, api):
    from starlette.responses import JSONResponse

    upstream.handler = _summary_or(
        lambda rec: JSONResponse({"error": {"message": "overloaded", "type": "x"}}, status_code=529)
    )
    r = threshold_turn(proxy_url, api, stream=stream)
    assert r.status_code == 529, r.text[:300]
    assert "overloaded" in r.text and PREFIX not in r.text  # the upstream's error; no compaction without its turn


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_the_upstream_stream_breaks_after_the_lead(proxy_url, upstream, api):
    from starlette.responses import StreamingResponse

    def broken(rec):
        msg = afake.message(afake.text("Done " * 50)) if api == "messages" else None
        chunks = (
            afake.events(msg)
            if api == "messages"
            else fake.sse_stream(fake.response(fake.message("Done " * 50), request=rec.json()))
        )

        async def body():
            for chunk in chunks[:3]:
                yield chunk if isinstance(chunk, bytes) else chunk.encode()
            raise RuntimeError("connection reset")

        return StreamingResponse(body(), media_type="text/event-stream")

    upstream.handler = _summary_or(broken)
    r = threshold_turn(proxy_url, api, stream=True)
    assert r.status_code == 200
    assert PREFIX in r.text  # the lead came first
    ending = "event: response.failed" if api == "responses" else "event: error"
    assert ending in r.text, r.text[-800:]  # the break said in the stream's own terms, after the lead


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_failing_summariser_makes_no_compaction_item_standing_for_nothing(proxy_url, upstream, api):
    from starlette.responses import JSONResponse

    from tests.harness.servers import default_handler, is_summary_call

    async def answer(request, rec):  # not `scripted`: it answers the summary calls itself
        if is_summary_call(rec):
            return JSONResponse({"error": {"message": "down"}}, status_code=500)
        return await default_handler(request, rec)

    upstream.handler = answer
    r = threshold_turn(proxy_url, api)
    kinds = [part["type"] for part in r.json()["output" if api == "responses" else "content"]]
    assert r.status_code == 200 and "compaction" not in kinds, r.text[:300]
    assert "compaction not made" in r.headers.get("x-offload-warning", ""), r.headers
    r = post(proxy_url, "/v1/responses/compact", body={"model": MODEL, "input": HISTORY}, key=new_key())
    assert r.status_code == 502 and r.json()["error"]["code"] == "compaction_failed", r.text
