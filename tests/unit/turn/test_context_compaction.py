"""The threshold compaction inside a turn (`proxy.turn._context_management.compact_at_threshold`), driven with typed
values: over the threshold the plan is replaced by the folded history and a lead (a Responses
`compaction` item, a Messages `compaction` block) opens the answer; below it, when counting, or
when the store refuses, nothing changes but a warning."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from proxy.core.compaction import COMPACTION_ACTION, PREFIX, Offload, Plan, Threshold
from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_marker
from proxy.core.tokens import counter_for_model
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from proxy.offload.pipeline import Prepared
from proxy.offload.records import CompactionRecords, RefStore
from proxy.offload.summarizer import Compressed
from proxy.store import StoreUnavailable
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn._context_management import Emulation, compact_at_threshold

pytestmark = pytest.mark.anyio
COUNTER = counter_for_model("gpt-5")
REF = "abcdefgh12345678"


class Folding:
    """A compressor whose fold answers what it is given."""

    def __init__(self, result: Compressed) -> None:
        self.result, self.ctx = result, SimpleNamespace(instruction=None)

    async def fold(self, compacted, originals, settings, counter, *, keep_recent, cpu):
        return self.result


class DownRefs(RefStore):
    def __init__(self) -> None:
        pass

    async def save(self, *args, **kwargs):
        raise StoreUnavailable("connection refused")


def responses_items() -> list[dict]:
    def message(role, text):
        return {"type": "message", "role": role, "content": text}

    return [
        message("developer", "rules"),
        message("user", "task"),
        message("assistant", "a1 " * 800),
        message("user", "later"),
        message("assistant", "a2 " * 800),
    ]


def messages_items() -> list[dict]:
    return [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a1 " * 800},
        {"role": "user", "content": "later"},
        {"role": "assistant", "content": "a2 " * 800},
        {"role": "user", "content": "go on"},
    ]


@pytest.fixture
def store(tmp_path):
    return SQLiteStore(tmp_path)


async def run(fmt, items, folded, store, *, threshold=Threshold(1000), refs=None, new_summaries=True):
    prepared = Prepared(Plan(items, tokens_before=COUNTER.messages(items), tokens_after=COUNTER.messages(items)))
    emulation = Emulation(True, {}, items, threshold=threshold)
    records = CompactionRecords(store, "ns", 3600, sealer=Sealer(None), api=fmt.compaction_emulation.records_api)
    folder = Folding(folded)
    prepared, lead = await compact_at_threshold(
        emulation,
        prepared,
        fmt=fmt,
        settings=OffloadSettings(),
        counter=COUNTER,
        history=items,
        refs=refs or RefStore(store, "ns", 3600, sealer=Sealer(None)),
        records=records,
        compressor=lambda: folder,
        new_summaries=new_summaries,
    )
    return lead, prepared, records


def summary(fmt):
    return fmt.view.summary_item(history_marker(REF, 3, 30) + "\nthe summary")


async def test_over_the_threshold_a_responses_turn_opens_with_a_compaction_item(store):
    items = responses_items()
    folded = [items[0], items[1], summary(RESPONSES), items[3]]
    lead, prepared, records = await run(
        RESPONSES,
        items,
        Compressed(
            folded,
            Offload(REF, "history", "the originals", 30),
            summary_at=2,
            usage_in=300,
            usage_out=40,
            usage={"prompt_tokens": 300, "completion_tokens": 40},
        ),
        store,
    )
    [item] = lead.lead
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(PREFIX) and not lead.paused
    assert await records.load(item["encrypted_content"]) == [m for m in folded if m["role"] != "developer"]
    assert prepared.plan.items == folded and REF in prepared.plan.refs and REF in prepared.written
    assert prepared.plan.tokens_after < prepared.plan.tokens_before
    assert COMPACTION_ACTION in prepared.action and prepared.summary_usage["prompt_tokens"] == 300
    [event] = [e for e in prepared.events if e["type"] == "provider_compaction"]
    assert event["endpoint"] == "responses" and event["ref"] == REF


async def test_a_messages_turn_opens_with_a_compaction_block_and_may_pause(store):
    items = messages_items()
    folded = [items[0], summary(MESSAGES), items[2], items[4]]
    lead, prepared, _ = await run(
        MESSAGES,
        items,
        Compressed(
            folded,
            Offload(REF, "history", "the originals", 30),
            summary_at=1,
            usage={"prompt_tokens": 300, "completion_tokens": 40},
        ),
        store,
        threshold=Threshold(1000, pause=True),
    )
    [block] = lead.lead
    assert block["type"] == "compaction" and "the summary" in block["content"] and lead.paused
    assert (lead.tokens_in, lead.tokens_out) == (300, 40)


@pytest.mark.parametrize("case", ["below", "counting", "no threshold"])
async def test_nothing_below_the_threshold_when_counting_or_unasked(store, case):
    items = responses_items()
    kwargs = {
        "below": {"threshold": Threshold(10**6)},
        "counting": {"new_summaries": False},
        "no threshold": {"threshold": None},
    }[case]
    lead, prepared, _ = await run(RESPONSES, items, Compressed(items), store, **kwargs)
    assert lead.lead == [] and prepared.plan.items == items and prepared.warnings == []


async def test_a_store_that_refuses_leaves_the_turn_as_planned_with_a_warning(store):
    items = responses_items()
    folded = [items[0], items[1], summary(RESPONSES), items[3]]
    lead, prepared, _ = await run(
        RESPONSES, items, Compressed(folded, Offload(REF, "history", "x", 30), summary_at=2), store, refs=DownRefs()
    )
    assert lead.lead == [] and prepared.plan.items == items
    assert prepared.warnings == ["threshold compaction not made: the store refused it (connection refused)"]
