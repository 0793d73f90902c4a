"""An upstream naming its responses `..`, `.`, with a lone surrogate or a header in the id: the
chained DELETE never leaves /v1/responses/{id} and never fails the client's own DELETE."""

import json

import httpx2
import pytest
from starlette.responses import Response

from tests.e2e.test_chain_attacks import HEADERS, TOOLS, A, history
from tests.harness.requests import post
from tests.harness.responses import function_call, message, refs_in_input, response
from tests.harness.servers import default_handler, scripted


def raw_json(rec, *output, id):
    return Response(json.dumps(response(*output, id=id, request=rec.json())), media_type="application/json")


@pytest.mark.parametrize("last", ["..", ".", "resp_\ud800", "../files/f", "a/b", "x\r\nX-Evil: 1", "r" * 300])
def test_hostile_last_id_delete(make_proxy, upstream, last):
    with make_proxy() as url:
        upstream.handler = scripted(
            lambda rec: raw_json(
                rec, function_call("context_reload", {"ref": refs_in_input(rec)[0]}, call_id="c1"), id="resp_i_1"
            ),
            lambda rec: raw_json(rec, message("done"), id=last),
        )
        r = post(
            url, "/v1/responses", body={"model": "gpt-5", "input": history(), "tools": TOOLS}, key=A, headers=HEADERS
        )
        assert r.status_code == 200 and r.json()["id"] == "resp_i_1", r.text
        raw = []

        async def handler(request, rec):
            raw.append((request.method, request.scope["raw_path"]))
            return await default_handler(request, rec)

        upstream.handler = handler
        r = httpx2.delete(f"{url}/v1/responses/resp_i_1", headers={"authorization": f"Bearer {A}"})
        print(repr(last), r.status_code, raw)
        assert r.status_code == 200
        assert all(p.startswith(b"/v1/responses/") and p.count(b"/") == 3 for _, p in raw), raw
