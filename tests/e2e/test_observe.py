"""Prometheus metrics and JSON request logs: what they count, and what they never contain."""

from __future__ import annotations

import json
import logging
import re
import time

import httpx2
from starlette.responses import JSONResponse

from proxy.offload.tenant import tenant_namespace
from tests.harness.history import agent_history, refs_sent
from tests.harness.servers import ProxyProcess, completion, tool_call

SECRET = "sk-very-secret-credential"
HEADERS = {"authorization": f"Bearer {SECRET}", "X-Offload-Max-Total-Tokens": "1000"}


def reload_once(request, rec):
    last = rec.json()["messages"][-1]
    if last.get("tool_call_id") == "reload_1" or not refs_sent(rec):
        return JSONResponse(completion("done"), headers={"x-request-id": "req_observed"})
    return JSONResponse(
        completion(None, tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]}, id="reload_1")])
    )


async def handler(request, rec):
    if not rec.path.endswith("/chat/completions"):
        return JSONResponse({"object": "list", "data": []})
    return reload_once(request, rec)


def sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_count_requests_tokens_refs_reloads(make_proxy, upstream):
    upstream.handler = handler
    history = agent_history(steps=4)
    with make_proxy(metrics_tenant_label=True) as url:
        r = httpx2.post(f"{url}/v1/chat/completions", json={"model": "gpt-4o", "messages": history}, headers=HEADERS)
        assert r.status_code == 200
        httpx2.get(f"{url}/v1/models", headers=HEADERS)
        text = httpx2.get(f"{url}/metrics").text
    tenant = tenant_namespace(f"Bearer {SECRET}", None)[:12]
    assert sample(text, "offload_requests_total", route="chat", status="200", tenant=tenant) == 1
    assert sample(text, "offload_requests_total", route="relay", status="200") == 1
    assert sample(text, "offload_tokens_before_total", tenant=tenant) == int(r.headers["x-offload-tokens-before"])
    assert sample(text, "offload_tokens_after_total", tenant=tenant) == int(r.headers["x-offload-tokens-after"])
    assert sample(text, "offload_refs_created_total") == 3
    assert sample(text, "offload_offloaded_bytes_total") == sum(len(history[i]["content"]) for i in (3, 5, 7))
    assert sample(text, "offload_reload_calls_total", tool="context_reload") == 1
    assert sample(text, "offload_reload_rounds_total") == 1
    assert sample(text, "offload_upstream_ttfb_seconds_count", route="chat") == 1
    assert sample(text, "offload_overhead_seconds_count", route="chat") == 1
    assert sample(text, "offload_store_seconds_count") > 0
    assert SECRET not in text and "step0 line" not in text


def test_paths_a_client_chooses_never_become_route_labels(make_proxy, upstream):
    """Each label value is a time series kept for the process's life: random paths are one label."""
    with make_proxy() as url:
        for i in range(5):
            assert httpx2.get(f"{url}/no-such-page-{i}").status_code == 404
            assert httpx2.get(f"{url}/dashboard/no-such-file-{i}.js").status_code == 404
        assert httpx2.get(f"{url}/dashboard").status_code == 200
        text = httpx2.get(f"{url}/metrics").text
    assert "no-such" not in text
    assert sample(text, "offload_requests_total", route="other", status="404") == 5
    assert sample(text, "offload_requests_total", route="dashboard", status="404") == 5
    assert sample(text, "offload_requests_total", route="dashboard", status="200") == 1


def test_tenant_label_only_when_enabled_and_admin_token(make_proxy, upstream):
    with make_proxy(admin_token="adm1n") as url:
        httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
            headers=HEADERS,
        )
        assert httpx2.get(f"{url}/metrics").status_code == 401
        assert httpx2.get(f"{url}/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
        text = httpx2.get(f"{url}/metrics", headers={"authorization": "Bearer adm1n"}).text
    assert sample(text, "offload_requests_total", route="chat", status="200") == 1
    assert "tenant=" not in text


def test_one_json_log_line_per_request(client, upstream, caplog):
    upstream.handler = handler
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        client.chat.completions.create(
            model="gpt-4o",
            messages=agent_history(steps=4),
            stream=False,
            extra_headers={"X-Offload-Max-Total-Tokens": "1000"},
        )
        deadline = time.monotonic() + 5
        while not [r for r in caplog.records if r.name == "proxy.access"] and time.monotonic() < deadline:
            time.sleep(0.05)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "proxy.access"]
    assert len(lines) == 1
    line = lines[0]
    assert line["request_id"] == "req_observed" and line["route"] == "chat" and line["status"] == 200
    assert line["model"] == "gpt-4o" and line["stream"] is False and line["action"] == "compact"
    assert line["reload_rounds"] == 1 and line["upstream_status"] == 200
    assert line["tokens_before"] > line["tokens_after"] > 0
    assert re.fullmatch(r"[0-9a-f]{12}", line["tenant"])
    assert {"duration_ms", "overhead_ms", "upstream_ttfb_ms"} <= set(line)
    raw = json.dumps(lines)
    assert "sk-test-key" not in raw and "step0 line" not in raw


def test_workers_share_metrics_and_log_json(upstream, tmp_path):
    proxy = ProxyProcess("--workers", "2", "--upstream", f"{upstream.url}/v1", data_dir=tmp_path, capture=True)
    url = proxy.start().url
    try:
        for _ in range(8):
            with httpx2.Client(headers=HEADERS) as fresh:  # new connections, spread over the workers
                fresh.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
                )
        text = httpx2.get(f"{url}/metrics").text
        assert sample(text, "offload_requests_total", route="chat", status="200") == 8
    finally:
        err = proxy.stop()
    requests = [json.loads(line) for line in err.splitlines() if '"event":"request"' in line]
    assert len(requests) == 8 and all(r["route"] == "chat" for r in requests)


def test_responses_requests_are_counted_as_their_own_route(make_proxy, upstream):
    from tests.e2e.test_responses_clients import HEADERS as RESPONSES_HEADERS
    from tests.e2e.test_responses_clients import history, reload_then_answer

    upstream.handler = reload_then_answer()
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/responses", json={"model": "gpt-5", "input": history()}, headers={**HEADERS, **RESPONSES_HEADERS}
        )
        assert r.status_code == 200 and r.headers["x-offload-action"] == "compact"
        httpx2.get(f"{url}/v1/responses/resp_round_1", headers=HEADERS)
        text = httpx2.get(f"{url}/metrics").text
        deadline = time.monotonic() + 5
        while True:  # events are recorded once the answer is sent
            found = httpx2.get(f"{url}/v1/offload/events", headers=HEADERS).json()["data"]
            if len(found) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert sample(text, "offload_requests_total", route="responses", status="200") == 1
    assert sample(text, "offload_requests_total", route="relay", status="200") == 1
    assert sample(text, "offload_reload_rounds_total") == 1
    assert sample(text, "offload_reload_calls_total", tool="context_reload") == 1
    assert sample(text, "offload_refs_created_total") == 1
    assert [e["type"] for e in found][:2] == ["compaction", "reload"]
