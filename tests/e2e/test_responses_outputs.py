"""Every Responses item carrying a tool's output that the README lists, through the real server.

One request holds each of them with a 4.8 K-token output: the upstream gets each output as a
marker with `ref=` (the item's other fields, its place and the item count unchanged), and
`context_reload` of each ref brings the exact text back.
"""

from __future__ import annotations

import json

import httpx2

from proxy.core.tokens import counter_for_model
from tests.harness.history import big_text_over
from tests.harness.responses import answering, function_call, input_items, message, refs_in_input
from tests.harness.servers import scripted
from tests.unit.formats.test_responses_compaction import OFFLOADED

HEADERS = {
    "authorization": "Bearer sk-test-key",
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
    "X-Offload-Max-Reload-Tokens": "50000",
    "X-Offload-Mode": "compact",
}  # compaction only: no summary replaces the history


def labelled(output: dict, label: str) -> tuple[dict, str]:
    """`output` with a text of its own (texts differ, so refs do): the item and the text."""
    text = big_text_over(4_800, counter_for_model("gpt-5"), label)  # by the counter in use
    value = output["output"]
    if isinstance(value, list):
        value = [{**part, "text": text} if part.get("type") == "input_text" else part for part in value]
    else:
        value = text
    return {**output, "output": value}, text


def history() -> tuple[list[dict], dict[int, str]]:
    """A user message, every listed call and output, a user message; the outputs' positions → their texts."""
    items: list[dict] = [{"role": "user", "content": "Look at everything."}]
    texts: dict[int, str] = {}
    for n, (_, call, output, _) in enumerate(OFFLOADED):
        if call:
            items.append(call)
        item, text = labelled(output, f"kind{n}")
        texts[len(items)] = text
        items.append(item)
    items.append({"role": "user", "content": "Summarise."})
    return items, texts


def reload_every_ref(rec):
    return answering(
        *[
            function_call("context_reload", {"ref": ref}, call_id=f"call_reload_{i}")
            for i, ref in enumerate(refs_in_input(rec))
        ]
    )(rec)


def test_every_listed_output_goes_upstream_as_a_marker_and_reloads(proxy_url, upstream):
    upstream.handler = scripted(reload_every_ref, answering(message("done")))
    items, texts = history()
    r = httpx2.post(
        f"{proxy_url}/v1/responses",
        json={"model": "gpt-5", "input": items, "store": False},
        headers=HEADERS,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    first, second = upstream.responses_requests()
    sent = input_items(first)
    assert len(sent) == len(items)
    refs = refs_in_input(first)
    assert len(refs) == len(OFFLOADED) == len(set(refs))
    for position, item in enumerate(items):
        if position not in texts:
            assert sent[position] == item
            continue
        forwarded = sent[position]
        assert {k: v for k, v in forwarded.items() if k != "output"} == {k: v for k, v in item.items() if k != "output"}
        shown = json.dumps(forwarded["output"])
        assert "ref=" in shown and texts[position][-200:] not in shown, item["type"]
    # the reload round: each ref's exact text, and the history as first forwarded
    again = input_items(second)
    assert again[: len(sent)] == sent
    reloaded = [i["output"] for i in again[len(sent) :] if i.get("type") == "function_call_output"]
    assert reloaded == list(texts.values())
