"""No compaction token of the proxy's reaches any upstream (issue 29): a property test through the
real server. Valid tokens of this tenant's real records (two per API), spellings of them that
are not canonical, the provider's own compaction items and blocks, failed blocks, reasoning items,
and tokens pasted as text are placed at random positions in random histories of the three
formats, sent relayed and emulated, streamed or not, gzip-compressed or not, to every endpoint
that takes a history (`/v1/responses`, `/responses/input_tokens`, `/responses/compact`,
`/v1/messages`, `/messages/count_tokens`, `/v1/chat/completions`), with and without a threshold
compaction. Whatever the request, nothing the fake upstream receives holds a token in a
compaction position (an `encrypted_content`, a `compaction` item or block); the answer is the
one the rule predicts (200, or 400 `invalid_compaction` in the endpoint's shape, with nothing
sent upstream); and a token pasted as text goes on as the text it is."""

from __future__ import annotations

import gzip
import json
import uuid
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.compaction import PREFIX, is_ours
from tests.e2e.test_emulation_attacks import COMPACT_EDIT, MESSAGES, THRESHOLD, block_of, token_of
from tests.harness import anthropic as afake
from tests.harness import responses as fake
from tests.harness.compaction import BUILD_HISTORY
from tests.harness.requests import post
from tests.harness.servers import scripted

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")
EXAMPLES = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MODEL, CLAUDE = "gpt-5", "claude-sonnet-4-5"
FILLER = " ".join(f"w{k}" for k in range(700))  # enough to pass a 1,000-token threshold
COUNTS: dict[str, int] = {}


def _count(label: str) -> None:
    COUNTS[label] = COUNTS.get(label, 0) + 1


@pytest.fixture(scope="module")
def tenant(make_proxy, _fake_upstream_server):
    """A proxy of its own, one key, and two real tokens of each API made through it."""
    fake_upstream, _ = _fake_upstream_server
    fake_upstream.reset()
    fake_upstream.handler = scripted(_answer)
    key = f"sk-{uuid.uuid4().hex}"
    with make_proxy() as url:
        responses = [
            token_of(url, key),
            _compacted(url, key, [*BUILD_HISTORY, {"type": "message", "role": "user", "content": "more"}]),
        ]
        messages = [
            block_of(url, key)["encrypted_content"],
            _paused(url, key, [*MESSAGES, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]),
        ]
        assert len(set(responses)) == len(set(messages)) == 2
        yield {"url": url, "key": key, "responses": responses, "messages": messages}
    print(f"\n[token positions] examples per endpoint and outcome: {dict(sorted(COUNTS.items()))}")


def _answer(rec):
    if afake.is_messages_create(rec):
        return afake.answer(rec, afake.message(afake.text("Done.")))
    return fake.answer(rec, fake.message("Hello there"))


def _compacted(url: str, key: str, history: list) -> str:
    r = post(url, "/v1/responses/compact", json={"model": MODEL, "input": history}, key=key, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["output"][-1]["encrypted_content"]


def _paused(url: str, key: str, messages: list) -> str:
    edit = {"edits": [{**COMPACT_EDIT["edits"][0], "pause_after_compaction": True}]}
    r = post(
        url,
        "/v1/messages",
        json={"model": CLAUDE, "max_tokens": 64, "messages": messages, "context_management": edit},
        key=key,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r.json()["content"][0]["encrypted_content"]


# ---------------------------------------------------------------- what the upstream received


def _received(rec) -> Any:
    body = rec.body
    if rec.headers.get("content-encoding", "").strip() == "gzip":
        body = gzip.decompress(body)
    try:
        return json.loads(body)
    except ValueError:
        return None


def _in_compaction_positions(value: Any) -> list[str]:
    """Tokens (any spelling) in an `encrypted_content` or anywhere inside a `compaction` item/block."""
    found, stack = [], [(value, False)]
    while stack:
        node, inside = stack.pop()
        if isinstance(node, dict):
            inside = inside or node.get("type") == "compaction"
            # inside an `encrypted_content` of another JSON type (an array, an object) counts too
            stack.extend((v, inside or k == "encrypted_content") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, inside) for v in node)
        elif isinstance(node, str) and inside and (is_ours(node) or PREFIX in node):
            found.append(node)
    return found


def _assert_nothing_leaked(upstream) -> None:
    for rec in upstream.requests:
        leaked = _in_compaction_positions(_received(rec))
        assert not leaked, (rec.path, leaked[:1])


# ---------------------------------------------------------------- histories


def _spelled(token: str, how: int) -> str:
    """A spelling of `token` that is not canonical: padding, a character outside the alphabet,
    whitespace, case."""
    return [token + "==", token[:40] + "!!" + token[40:], " " + token, token.upper()][how]


def _elements(api: str, tokens: list[str]):
    """(kind, item) pairs: kind tells the rule what the element is."""
    ours = st.sampled_from(tokens)
    text_token = st.one_of(st.sampled_from(tokens), st.just("no token"))
    if api == "responses":
        mine = st.builds(lambda t: ("ours", {"type": "compaction", "id": "cmp_1", "encrypted_content": t}), ours)
        return st.one_of(
            mine,
            mine,
            mine,  # weighed: most histories hold valid tokens of ours
            st.builds(lambda t: ("text", {"type": "message", "role": "user", "content": f"see {t}"}), text_token),
            st.just(
                ("text", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]})
            ),
            st.just(("text", {"type": "message", "role": "developer", "content": "rules"})),
            st.builds(
                lambda t, h: ("bad", {"type": "compaction", "encrypted_content": _spelled(t, h)}),
                ours,
                st.integers(0, 3),
            ),
            st.just(("provider", {"type": "compaction", "encrypted_content": "gAAAAABprovider=="})),
            st.just(("text", {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABr=="})),
            st.builds(
                lambda t: ("stray", {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": t}), ours
            ),
        )
    mine = st.builds(lambda t: ("ours", {"type": "compaction", "content": "summary", "encrypted_content": t}), ours)
    block = st.one_of(
        mine,
        mine,
        mine,  # weighed: most histories hold valid tokens of ours
        st.builds(lambda t: ("text", {"type": "text", "text": f"see {t}"}), text_token),
        st.builds(lambda t: ("ours", {"type": "compaction", "content": None, "encrypted_content": t}), ours),
        st.builds(
            lambda t, h: ("bad", {"type": "compaction", "content": "s", "encrypted_content": _spelled(t, h)}),
            ours,
            st.integers(0, 3),
        ),
        st.just(("provider", {"type": "compaction", "content": "their summary", "encrypted_content": "EpYBnative"})),
        st.just(("provider", {"type": "compaction", "content": "their summary"})),
        st.just(("failed", {"type": "compaction", "content": None})),
    )
    return st.tuples(st.sampled_from(["user", "assistant"]), st.lists(block, min_size=1, max_size=3))


def _responses_expectation(kinds: list[str], *, emulating: bool) -> str:
    if "stray" in kinds:
        return "400"
    positions = [k for k in kinds if k in ("ours", "bad", "provider")]
    if not positions:
        return "200"
    newest = positions[-1]
    if newest == "bad" or (newest == "provider" and emulating):
        return "400"
    return "200"


def _messages_expectation(blocks: list[tuple[str, dict]]) -> str:
    for kind, block in reversed(blocks):  # the newest block that is no no-op decides
        if kind in ("ours", "bad") or (kind == "provider"):
            return "400" if kind == "bad" else "200"
    return "200"


def _variant(body: dict, path: str, threshold: Any) -> dict:
    """`body` as the path's variant asks: streamed (`…-stream`), with a threshold compaction (`…-threshold`)."""
    if path.endswith("-stream"):
        return {**body, "stream": True}
    if path.endswith("-threshold"):
        return {**body, "context_management": threshold}
    return body


def encoded(body: dict, *, compressed: bool) -> bytes:
    content = json.dumps(body).encode()
    return gzip.compress(content) if compressed else content


def position_headers(mode: str, *, compressed: bool) -> dict[str, str]:
    return {"X-Offload-Context-Management": mode, **({"Content-Encoding": "gzip"} if compressed else {})}


def _check(r: httpx2.Response, expected: str, upstream, *, family: str, label: str) -> None:
    _count(f"{label}:{expected}")
    if expected == "400":
        assert r.status_code == 400, r.text[:400]
        error = r.json()["error"]
        if family == "openai":
            assert error["code"] == "invalid_compaction" and error["param"], r.text[:400]
        else:  # Anthropic's shape: a type and a message (naming the field)
            assert r.json()["type"] == "error" and error["type"] == "invalid_request_error", r.text[:400]
            assert "compaction" in error["message"] and "messages[" in error["message"], r.text[:400]
        assert not upstream.requests, [rec.path for rec in upstream.requests]
    else:
        assert r.status_code == 200, r.text[:400]
        assert "may not hold" not in r.headers.get("x-offload-warning", "")
        if "emulated-compaction" in r.headers.get("x-offload-action", ""):
            _count("threshold compactions made")  # each stored a record: none held a token (save refuses one)
    _assert_nothing_leaked(upstream)


# ---------------------------------------------------------------- the properties

RESPONSES_PATHS = [
    "responses",
    "responses-stream",
    "responses-threshold",
    "responses/input_tokens",
    "responses/compact",
]


@pytest.mark.parametrize("mode", ["relay", "emulate"])
@pytest.mark.parametrize("path", RESPONSES_PATHS)
@EXAMPLES
@given(data=st.data())
def test_responses_tokens_anywhere_never_reach_the_upstream(tenant, upstream, path, mode, data):
    upstream.handler = scripted(_answer)
    elements = data.draw(st.lists(_elements("responses", tenant["responses"]), min_size=1, max_size=7))
    compressed = data.draw(st.booleans())
    items = [item for _, item in elements] + [{"type": "message", "role": "user", "content": f"next {FILLER}"}]
    body = _variant(
        {"model": MODEL, "input": items, **({} if path == "responses/compact" else {"store": False})}, path, THRESHOLD
    )
    endpoint = path.split("-")[0]
    emulating = mode == "emulate" and endpoint != "responses/input_tokens"  # input_tokens is always relayed
    expected = _responses_expectation([k for k, _ in elements], emulating=emulating)
    upstream.requests.clear()
    r = post(
        tenant["url"],
        f"/v1/{endpoint}",
        body=encoded(body, compressed=compressed),
        key=tenant["key"],
        headers=position_headers(mode, compressed=compressed),
    )
    _check(r, expected, upstream, family="openai", label=f"{path}:{mode}")
    if expected == "200" and endpoint == "responses":
        sent = [rec for rec in upstream.responses_requests()][0].body.decode()
        newest = max((i for i, (k, _) in enumerate(elements) if k in ("ours", "bad", "provider")), default=-1)
        for kind, item in elements[newest + 1 :]:  # a token pasted as text after the compaction: content, as sent
            if kind == "text" and PREFIX in json.dumps(item):
                assert json.dumps(item["content"])[1:-1] in sent


MESSAGES_PATHS = ["messages", "messages-stream", "messages-threshold", "messages/count_tokens"]


@pytest.mark.parametrize("mode", ["relay", "emulate"])
@pytest.mark.parametrize("path", MESSAGES_PATHS)
@EXAMPLES
@given(data=st.data())
def test_messages_tokens_anywhere_never_reach_the_upstream(tenant, upstream, path, mode, data):
    upstream.handler = scripted(_answer)
    messages_drawn = data.draw(st.lists(_elements("messages", tenant["messages"]), min_size=1, max_size=5))
    compressed = data.draw(st.booleans())
    messages = [{"role": role, "content": [block for _, block in blocks]} for role, blocks in messages_drawn]
    messages.append({"role": "user", "content": f"next {FILLER}"})
    body = _variant({"model": CLAUDE, "max_tokens": 64, "messages": messages}, path, COMPACT_EDIT)
    expected = _messages_expectation([b for _, blocks in messages_drawn for b in blocks])
    upstream.requests.clear()
    r = post(
        tenant["url"],
        "/v1/" + path.split("-")[0],
        body=encoded(body, compressed=compressed),
        key=tenant["key"],
        headers=position_headers(mode, compressed=compressed),
    )
    _check(r, expected, upstream, family="anthropic", label=f"{path}:{mode}")


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_chat_a_token_pasted_as_text_is_content(tenant, upstream, data):
    """Chat has no compaction items: a token in a message's text is text, forwarded as sent."""
    upstream.handler = scripted(_answer)
    tokens = tenant["responses"] + tenant["messages"]
    texts = data.draw(
        st.lists(
            st.one_of(st.sampled_from(tokens).map(lambda t: f"pasted: {t}"), st.just("hello")), min_size=1, max_size=5
        )
    )
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "go on"})
    stream = data.draw(st.booleans())
    upstream.requests.clear()
    compressed = data.draw(st.booleans())
    r = post(
        tenant["url"],
        "/v1/chat/completions",
        body=encoded({"model": MODEL, "messages": messages, "stream": stream}, compressed=compressed),
        key=tenant["key"],
        headers=position_headers("emulate", compressed=compressed),
    )
    _count("chat:200")
    assert r.status_code == 200, r.text[:300]
    (sent,) = upstream.chat_requests()
    assert [m["content"] for m in _received(sent)["messages"]] == [m["content"] for m in messages]
    _assert_nothing_leaked(upstream)


# ---------------------------------------------------------------- relayed paths that carry items


@pytest.mark.parametrize(
    ("path", "family"),
    [
        ("messages/batches", "anthropic"),
        ("messages//batches/", "anthropic"),
        ("conversations", "openai"),
        ("conversations/conv_1/items", "openai"),
        # spellings the upstream decodes to the same path
        ("messages/batch%65s", "anthropic"),
        ("messages%2Fbatches", "anthropic"),
        ("conversation%2573", "openai"),
        ("conversations/conv_1%2Fitem%73", "openai"),
    ],
)
def test_a_relayed_body_carrying_items_never_takes_a_token_upstream(tenant, upstream, path, family):
    """Endpoints the proxy does not manage but whose body holds a history (Anthropic message
    batches, items added to an OpenAI conversation): a token of ours in an `encrypted_content`
    is a 400 (the proxy cannot expand it there); pasted as text it goes on; without one the body
    is relayed byte for byte."""
    token = tenant["messages" if family == "anthropic" else "responses"][0]
    if family == "anthropic":

        def body(block):
            return {
                "requests": [
                    {
                        "custom_id": "a",
                        "params": {
                            "model": CLAUDE,
                            "max_tokens": 5,
                            "messages": [
                                {"role": "assistant", "content": [block]},
                                {"role": "user", "content": "next"},
                            ],
                        },
                    }
                ]
            }

        carried = body({"type": "compaction", "content": "s", "encrypted_content": token})
        pasted = body({"type": "text", "text": f"see {token}"})
    else:

        def body(item):
            return {"items": [item, {"type": "message", "role": "user", "content": "next"}]}

        carried = body({"type": "compaction", "encrypted_content": token.upper()})
        pasted = body({"type": "message", "role": "user", "content": f"see {token}"})
    for compressed in (False, True):
        upstream.requests.clear()
        r = post(
            tenant["url"],
            f"/v1/{path}",
            body=encoded(carried, compressed=compressed),
            key=tenant["key"],
            headers=position_headers("relay", compressed=compressed),
        )
        assert r.status_code == 400 and "compaction token" in r.text, r.text[:300]
        assert not upstream.requests
        r = post(
            tenant["url"],
            f"/v1/{path}",
            body=encoded(pasted, compressed=compressed),
            key=tenant["key"],
            headers=position_headers("relay", compressed=compressed),
        )
        assert r.status_code == 200 and _received(upstream.requests[-1]) == pasted, r.text[:300]
    plain = json.dumps(
        body(
            {"type": "text", "text": "hi"}
            if family == "anthropic"
            else {"type": "message", "role": "user", "content": "hi"}
        ),
        indent=1,
    ).encode()
    headers = (
        {"x-api-key": tenant["key"], "anthropic-version": "2023-06-01"}
        if family == "anthropic"
        else {"Authorization": f"Bearer {tenant['key']}"}
    )
    r = httpx2.post(f"{tenant['url']}/v1/{path}", content=plain, headers=headers, timeout=30)
    assert r.status_code == 200 and upstream.requests[-1].body == plain


# ---------------------------------------------------------------- an encrypted_content of another JSON type


def _wrapped(token: str) -> list:
    return [[token], {"state": token}, [{"deep": [token]}]]


@pytest.mark.parametrize("mode", ["relay", "emulate"])
def test_a_token_inside_an_encrypted_content_of_another_type_is_refused(tenant, upstream, mode):
    """An `encrypted_content` holding an array or an object (not the string the APIs define) with a
    token of ours inside is a 400 naming the token's own path, in a compaction item (block) or not:
    it was forwarded as it was, the token with it."""
    token, block_token = tenant["responses"][0], tenant["messages"][0]
    user = {"type": "message", "role": "user", "content": "next"}
    for value in _wrapped(token):
        for item in (
            {"type": "compaction", "encrypted_content": value},
            {"type": "reasoning", "summary": [], "encrypted_content": value},
        ):
            for path in ("responses", "responses/input_tokens", "responses/compact"):
                upstream.requests.clear()
                r = post(
                    tenant["url"],
                    f"/v1/{path}",
                    body=encoded({"model": MODEL, "input": [user, item, user]}, compressed=False),
                    key=tenant["key"],
                    headers=position_headers(mode, compressed=False),
                )
                _check(r, "400", upstream, family="openai", label=f"{path}:wrapped")
                assert r.json()["error"]["param"].startswith("input[1].encrypted_content"), r.text[:300]
        r = post(
            tenant["url"],
            "/v1/chat/completions",
            body=encoded(
                {"model": MODEL, "messages": [{"role": "user", "content": "hi", "encrypted_content": value}]},
                compressed=False,
            ),
            key=tenant["key"],
            headers=position_headers(mode, compressed=False),
        )
        _check(r, "400", upstream, family="openai", label="chat:wrapped")
    for value in _wrapped(block_token):
        for path in ("messages", "messages/count_tokens"):
            upstream.requests.clear()
            messages = [
                {"role": "user", "content": "the task"},
                {"role": "assistant", "content": [{"type": "compaction", "encrypted_content": value}]},
                {"role": "user", "content": "next"},
            ]
            r = post(
                tenant["url"],
                f"/v1/{path}",
                body=encoded({"model": CLAUDE, "max_tokens": 64, "messages": messages}, compressed=False),
                key=tenant["key"],
                headers=position_headers(mode, compressed=False),
            )
            _check(r, "400", upstream, family="anthropic", label=f"{path}:wrapped")
    _assert_nothing_leaked(upstream)


@pytest.mark.parametrize("mode", ["relay", "emulate"])
def test_a_key_spelling_a_compaction_position_is_no_compaction_position(tenant, upstream, mode):
    """A top-level key named like the path of a compaction item (`"input[0]"`, `"messages[0].content[0]"`,
    `"input[²]"`) holding a token: a 400, not taken for the compaction item it spells (its token went
    upstream as it was), nor a 500."""
    token, block_token = tenant["responses"][0], tenant["messages"][0]
    user = {"type": "message", "role": "user", "content": "next"}
    for key in ("input[0]", "input[²]"):
        for path in ("responses", "responses/input_tokens", "responses/compact"):
            upstream.requests.clear()
            body = {
                "model": MODEL,
                "input": [{"type": "compaction", "encrypted_content": token}, user],
                key: {"encrypted_content": token},
            }
            r = post(
                tenant["url"],
                f"/v1/{path}",
                body=encoded(body, compressed=False),
                key=tenant["key"],
                headers=position_headers(mode, compressed=False),
            )
            _check(r, "400", upstream, family="openai", label=f"{path}:key-path")
            assert r.json()["error"]["param"] == f'["{key}"].encrypted_content'.replace("²", "\\u00b2"), r.text[:300]
    for path in ("messages", "messages/count_tokens"):
        upstream.requests.clear()
        messages = [
            {"role": "assistant", "content": [{"type": "compaction", "encrypted_content": block_token}]},
            {"role": "user", "content": "next"},
        ]
        body = {
            "model": CLAUDE,
            "max_tokens": 64,
            "messages": messages,
            "messages[0].content[0]": {"encrypted_content": block_token},
        }
        r = post(
            tenant["url"],
            f"/v1/{path}",
            body=encoded(body, compressed=False),
            key=tenant["key"],
            headers=position_headers(mode, compressed=False),
        )
        _check(r, "400", upstream, family="anthropic", label=f"{path}:key-path")
