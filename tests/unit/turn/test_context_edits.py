"""The store side of the emulated clearing edits (`proxy.turn._context_management.apply`): what is cleared
is stored first; a store that fails leaves the tool results as they are (a warning), thinking is
still cleared; nothing happens unless the proxy emulates a Messages request's edits."""

from __future__ import annotations

import pytest

from proxy.core.texts import tool_result_ref
from proxy.core.tokens import counter_for_model
from proxy.errors import ProxyError
from proxy.formats.messages import MESSAGES, history
from proxy.formats.responses import RESPONSES
from proxy.http.error_map import status_of
from proxy.offload.records import RefStore
from proxy.store import StoreUnavailable
from proxy.store.sqlite import SQLiteStore
from proxy.turn._context_management import Emulation, apply

pytestmark = pytest.mark.anyio
COUNTER = counter_for_model("claude-sonnet-4-5")
EDITS = {
    "edits": [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}},
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "tool_uses", "value": 1},
            "keep": {"type": "tool_uses", "value": 1},
        },
    ]
}
LOG = "\n".join(f"line {i}: all good here, nothing to see, value {i * 3}" for i in range(200))


def messages() -> list[dict]:
    out: list[dict] = [{"role": "user", "content": "go"}]
    for i in range(3):
        out.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm " * 50, "signature": "s"},
                    {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {}},
                ],
            }
        )
        out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": LOG}]})
    return out


class DownStore(RefStore):
    def __init__(self) -> None:
        self.quota = None

    async def save(self, *args, **kwargs):
        raise StoreUnavailable("connection refused")


async def run(refs, asked=EDITS, *, emulating=True, fmt=MESSAGES):
    body = {"messages": messages()}
    emulation = Emulation(emulating, body, history(body), asked=asked)
    done = await apply(
        emulation, emulation.items, fmt=fmt, body=body, counter=COUNTER, refs=refs, namespace="ns", session=None
    )
    return emulation, done


async def test_cleared_results_are_stored_and_reload(tmp_path):
    refs = RefStore(SQLiteStore(tmp_path), "ns", 3600)
    emulation, done = await run(refs)
    assert [a["type"] for a in done.applied] == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
    assert emulation.applied_edits == done.applied and done.cleared_tokens > 0
    markers = [tool_result_ref(MESSAGES.view.tool_text(i) or "") for i in done.items]
    refs_made = [r for r in markers if r]
    assert len(refs_made) == 2
    for ref in refs_made:
        assert (await refs.load(ref)).text == LOG


async def test_a_failing_store_clears_no_tool_result():
    emulation, done = await run(DownStore())
    assert [a["type"] for a in done.applied] == ["clear_thinking_20251015"]
    assert "store unavailable" in done.warnings[0] and not any(
        tool_result_ref(MESSAGES.view.tool_text(i) or "") for i in done.items
    )


async def test_nothing_unless_emulating_a_messages_request(tmp_path):
    refs = RefStore(SQLiteStore(tmp_path), "ns", 3600)
    for kwargs in ({"emulating": False}, {"asked": None}, {"fmt": RESPONSES}):
        emulation, done = await run(refs, **kwargs)
        assert done.applied is None and emulation.applied_edits is None and done.items == emulation.items


async def test_a_bad_config_is_a_400(tmp_path):
    with pytest.raises(ProxyError) as caught:
        await run(RefStore(SQLiteStore(tmp_path), "ns", 3600), {"edits": [{"type": "clear_all"}]})
    assert status_of(caught.value) == 400
