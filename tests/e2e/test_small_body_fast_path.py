"""The small-body fast path never changes what the pipeline would do: a ref= written as a JSON
escape, image parts counting more tokens than their bytes."""

import json

from tests.e2e.test_chain_attacks import HEADERS, TOOLS, A, history
from tests.harness.requests import post
from tests.harness.responses import answering, input_items, message, tool_names
from tests.harness.servers import scripted


def test_escaped_marker_is_treated_like_the_plain_one(make_proxy, upstream):
    with make_proxy() as url:
        upstream.handler = scripted(answering(message("ok")))
        assert (
            post(
                url,
                "/v1/responses",
                body={"model": "gpt-5", "input": history(), "tools": TOOLS},
                key=A,
                headers=HEADERS,
            ).status_code
            == 200
        )
        sent = upstream.responses_requests()[-1]
        marker = [i for i in input_items(sent) if i.get("type") == "function_call_output"][0]["output"]
        got = {}
        for name, raw in (
            ("plain", json.dumps({"model": "gpt-5", "input": [{"role": "user", "content": marker}]})),
            (
                "escaped",
                json.dumps({"model": "gpt-5", "input": [{"role": "user", "content": marker}]}).replace(
                    "ref=", "ref\\u003d"
                ),
            ),
        ):
            assert len(raw) < 1000
            upstream.requests.clear()
            r = post(
                url,
                "/v1/responses",
                body=raw.encode(),
                key=A,
                headers={**HEADERS, "X-Offload-Max-Total-Tokens": "2000", "X-Offload-Max-Tool-Message-Tokens": "1000"},
            )
            got[name] = (r.headers["x-offload-refs"], tool_names(upstream.responses_requests()[-1]))
        print(got)
        assert got["plain"] == got["escaped"], got


from tests.harness.responses import answer
from tests.harness.servers import is_summary_call, snapshot_answer


def test_small_body_of_images_skips_compression(proxy_url, upstream):
    async def handler(request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec, "<state_snapshot>so far</state_snapshot>")
        return answer(rec, message("fine"))

    upstream.handler = handler
    i = {"type": "input_image", "image_url": "u"}
    got = {}
    for limit in ("4000", "100"):  # the fast path (body <= min), then the pipeline (body > min)
        items = [
            {"role": "user", "content": [i, i]},
            {"role": "assistant", "content": "k"},
            {"role": "user", "content": [i, i]},
            {"role": "assistant", "content": "k"},
            {"role": "user", "content": "go"},
        ]
        raw = json.dumps({"model": "gpt-5", "input": items}, separators=(",", ":")).encode()
        upstream.requests.clear()
        r = post(
            proxy_url,
            "/v1/responses",
            body=raw,
            key=A,
            headers={
                **HEADERS,
                "X-Offload-Max-Total-Tokens": "350",
                "X-Offload-Max-Tool-Message-Tokens": limit,
                "X-Offload-Mode": "auto",
                "X-Offload-Max-Reload-Tokens": "1000",
                "X-Offload-Hard-Max-Tokens": "1",
                "X-Offload-Precompress-Ratio": "0",
            },
        )
        got[limit] = (len(raw), r.headers["x-offload-action"], r.headers["x-offload-tokens-before"])
    print(got)
    assert got["4000"][1] == got["100"][1], got
