"""The screenshots a summary covers are stored under their own refs, and kept alive with it.

A summary's originals name each image by its marker (`proxy.core.media.without_media`); the
turns that forward the summary no longer carry those markers themselves, so each of them extends
the images' expiry as it extends the summary's: a summary in use never names an expired image.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

from proxy.config import ServerSettings
from proxy.core import jsonio, texts
from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_ref
from proxy.formats.messages import MESSAGES
from proxy.offload.records import RefStore, TenantStore
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import DEFAULT_PROMPT, SummaryContext
from proxy.replay._simulation import fake_summarizer
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn import TurnInput, run_turn
from proxy.upstream.client import Upstream
from tests.harness.screens import b64, screenshot

TTL = 3600
SETTINGS = OffloadSettings(mode="compress", max_total_tokens=1500, hard_max_tokens=1, precompress_ratio=0)
SHOTS = [screenshot(step) for step in range(8)]


def body(extra: int = 0) -> dict:
    messages: list[dict] = [{"role": "user", "content": "Book the cheapest train to Lyon."}]
    for step, shot in enumerate(SHOTS):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{step}", "name": "computer", "input": {"action": "left_click"}}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{step}",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": b64(shot)},
                            }
                        ],
                    }
                ],
            }
        )
    for k in range(1 + extra):
        messages += [{"role": "assistant", "content": f"Checking {k}."}, {"role": "user", "content": "Go on."}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages}


async def turn(request: dict, tenant: TenantStore, upstream: Upstream) -> list:
    def compressor(sent: dict, settings: OffloadSettings, refs: RefStore, *, background: bool) -> Compressor:
        return Compressor(
            tenant,
            SummaryContext(
                upstream=upstream,
                headers=[],
                model="claude-sonnet-4-5",
                prompt=DEFAULT_PROMPT,
                timeout=30.0,
                wait=5.0,
                view=MESSAGES.view,
                wire=MESSAGES,
                body=sent,
            ),
        )

    done = await run_turn(
        TurnInput(MESSAGES, jsonio.dumps(request), request, MESSAGES.history(request), SETTINGS, tenant, compressor)
    )
    return done.prepared.plan.items


def summaries(items: list) -> list[str]:
    """The refs of the summaries among the forwarded items."""
    texts_ = [MESSAGES.view.text(item) or "" for item in items]
    return [r for r in map(history_ref, texts_) if r]


def expiries(store: SQLiteStore) -> dict[str, float]:
    with sqlite3.connect(store.path) as db:
        return dict(db.execute("SELECT key, expires FROM kv"))


@pytest.mark.anyio
async def test_a_summary_in_use_keeps_the_screenshots_it_names_alive(tmp_path):
    store = SQLiteStore(tmp_path)
    tenant = TenantStore(store, "tenant-a", TTL, Sealer(None))
    refs = tenant.refs()
    upstream = Upstream(ServerSettings(upstream="http://summariser.invalid/v1"), transport=fake_summarizer())
    first = await turn(body(), tenant, upstream)
    [ref] = summaries(first)
    stored = await refs.load(ref)
    assert stored is not None and b64(SHOTS[-1])[:1000] not in stored.text
    media = [m.group(2) for m in texts.MEDIA_MARKER_RE.finditer(stored.text)]
    assert len(media) == len(SHOTS)  # every screenshot, the ones still forwarded as images too
    for image, shot in zip(media, SHOTS):
        item = await refs.load(image)
        assert item is not None and (item.kind, item.text) == ("image", f"data:image/png;base64,{b64(shot)}")

    with sqlite3.connect(store.path) as db:  # everything stored is about to expire
        db.execute("UPDATE kv SET expires = ?", (time.time() + 100,))
    second = await turn(body(extra=1), tenant, upstream)  # forwards the same summary, no screenshot
    assert summaries(second) == [ref]
    assert not texts.MEDIA_MARKER_RE.search(jsonio.dumps(second).decode())
    left = expiries(store)
    for key in [refs._key(ref), *(refs._key(image) for image in media)]:
        assert left[key] > time.time() + TTL / 2, "kept alive by the turn that uses the summary"
    await upstream.aclose()
    await store.close()
