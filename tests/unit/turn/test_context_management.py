"""The provider's context management emulated (`proxy.turn._context_management`): the clearing
edits' store side (`apply`), the threshold compaction inside a turn (`compact_at_threshold`), and
the compaction asked now (`compact`: fold, store the originals and the record, what the client
keeps). Each part's own account opens its section."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from proxy.core.compaction import COMPACTION_ACTION, PREFIX, Offload, Plan, Threshold
from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_marker, tool_result_ref
from proxy.core.tokens import counter_for_model
from proxy.errors import ProxyError
from proxy.formats.messages import MESSAGES, history
from proxy.formats.responses import RESPONSES
from proxy.http.error_map import status_of
from proxy.offload.pipeline import Prepared
from proxy.offload.records import CompactionRecords, RefStore
from proxy.offload.summarizer import Compressed
from proxy.store import StoreUnavailable
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn._context_management import CompactionFailed, Emulation, apply, compact, compact_at_threshold

# The store side of the emulated clearing edits (`proxy.turn._context_management.apply`): what is cleared
# is stored first; a store that fails leaves the tool results as they are (a warning), thinking is
# still cleared; nothing happens unless the proxy emulates a Messages request's edits.

pytestmark = pytest.mark.anyio
CLAUDE_COUNTER = counter_for_model("claude-sonnet-4-5")
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


async def run_edits(refs, asked=EDITS, *, emulating=True, fmt=MESSAGES):
    body = {"messages": messages()}
    emulation = Emulation(emulating, body, history(body), asked=asked)
    done = await apply(
        emulation, emulation.items, fmt=fmt, body=body, counter=CLAUDE_COUNTER, refs=refs, namespace="ns", session=None
    )
    return emulation, done


async def test_cleared_results_are_stored_and_reload(tmp_path):
    refs = RefStore(SQLiteStore(tmp_path), "ns", 3600)
    emulation, done = await run_edits(refs)
    assert [a["type"] for a in done.applied] == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
    assert emulation.applied_edits == done.applied and done.cleared_tokens > 0
    markers = [tool_result_ref(MESSAGES.view.tool_text(i) or "") for i in done.items]
    refs_made = [r for r in markers if r]
    assert len(refs_made) == 2
    for ref in refs_made:
        assert (await refs.load(ref)).text == LOG


async def test_a_failing_store_clears_no_tool_result():
    emulation, done = await run_edits(DownStore())
    assert [a["type"] for a in done.applied] == ["clear_thinking_20251015"]
    assert "store unavailable" in done.warnings[0] and not any(
        tool_result_ref(MESSAGES.view.tool_text(i) or "") for i in done.items
    )


async def test_nothing_unless_emulating_a_messages_request(tmp_path):
    refs = RefStore(SQLiteStore(tmp_path), "ns", 3600)
    for kwargs in ({"emulating": False}, {"asked": None}, {"fmt": RESPONSES}):
        emulation, done = await run_edits(refs, **kwargs)
        assert done.applied is None and emulation.applied_edits is None and done.items == emulation.items


async def test_a_bad_config_is_a_400(tmp_path):
    with pytest.raises(ProxyError) as caught:
        await run_edits(RefStore(SQLiteStore(tmp_path), "ns", 3600), {"edits": [{"type": "clear_all"}]})
    assert status_of(caught.value) == 400


# The threshold compaction inside a turn (`proxy.turn._context_management.compact_at_threshold`), driven with typed
# values: over the threshold the plan is replaced by the folded history and a lead (a Responses
# `compaction` item, a Messages `compaction` block) opens the answer; below it, when counting, or
# when the store refuses, nothing changes but a warning.

GPT_COUNTER = counter_for_model("gpt-5")
REF = "abcdefgh12345678"


class ThresholdFolding:
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


async def run_threshold(fmt, items, folded, store, *, threshold=Threshold(1000), refs=None, new_summaries=True):
    prepared = Prepared(
        Plan(items, tokens_before=GPT_COUNTER.messages(items), tokens_after=GPT_COUNTER.messages(items))
    )
    emulation = Emulation(True, {}, items, threshold=threshold)
    records = CompactionRecords(store, "ns", 3600, sealer=Sealer(None), api=fmt.compaction_emulation.records_api)
    folder = ThresholdFolding(folded)
    prepared, lead = await compact_at_threshold(
        emulation,
        prepared,
        fmt=fmt,
        settings=OffloadSettings(),
        counter=GPT_COUNTER,
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
    lead, prepared, records = await run_threshold(
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
    lead, prepared, _ = await run_threshold(
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
    lead, prepared, _ = await run_threshold(RESPONSES, items, Compressed(items), store, **kwargs)
    assert lead.lead == [] and prepared.plan.items == items and prepared.warnings == []


async def test_a_store_that_refuses_leaves_the_turn_as_planned_with_a_warning(store):
    items = responses_items()
    folded = [items[0], items[1], summary(RESPONSES), items[3]]
    lead, prepared, _ = await run_threshold(
        RESPONSES, items, Compressed(folded, Offload(REF, "history", "x", 30), summary_at=2), store, refs=DownRefs()
    )
    assert lead.lead == [] and prepared.plan.items == items
    assert prepared.warnings == ["threshold compaction not made: the store refused it (connection refused)"]


# The emulated compaction: fold, store the originals and the record, what the client keeps.

VIEW = RESPONSES.view


def user(text):
    return {"type": "message", "role": "user", "content": text}


def assistant(text):
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


SYSTEM = {"type": "message", "role": "developer", "content": "rules"}
ITEMS = [SYSTEM, user("task"), assistant("a1 " * 500), user("later"), assistant("a2 " * 500)]
SUMMARY = VIEW.summary_item(history_marker(REF, 3, 30) + "\nthe summary")


class Folding:
    """A compressor whose fold answers what it is given."""

    def __init__(self, result: Compressed) -> None:
        self.result, self.calls = result, []

    async def fold(self, compacted, originals, settings, counter, *, keep_recent, cpu):
        self.calls.append(keep_recent)
        return self.result


@pytest.fixture
def parts(tmp_path):
    store = SQLiteStore(tmp_path)
    return (RefStore(store, "ns", 3600, sealer=Sealer(None)), CompactionRecords(store, "ns", 3600, sealer=Sealer(None)))


async def run_compact(parts, result, items=ITEMS):
    refs, records = parts
    folder = Folding(result)
    done = await compact(
        items,
        view=VIEW,
        compressor=folder,
        refs=refs,
        records=records,
        settings=OffloadSettings(),
        counter=counter_for_model("gpt-5"),
    )
    assert folder.calls == [0]  # everything folded: nothing recent kept apart
    return done


async def test_a_fold_stores_the_originals_and_the_record_and_keeps_the_user_messages(parts):
    record = [SYSTEM, user("task"), SUMMARY, user("later")]
    history = "".join(f"{m}\n" for m in ITEMS[2:])
    done = await run_compact(
        parts, Compressed(record, Offload(REF, "history", history, 30), summary_at=2, usage_in=300, usage_out=40)
    )
    refs, records = parts
    assert done.token.startswith(PREFIX) and await records.load(done.token) == record
    assert (await refs.load(REF)).text == history and done.written == {REF}
    assert done.kept_users == [user("task"), user("later")]  # not the summary, not the system item
    assert (done.tokens_in, done.tokens_out, done.ref) == (300, 40, REF)
    assert done.tokens_after < done.tokens_before
    [event] = [e for e in done.events if e["type"] == "provider_compaction"]
    assert event["emulated"] is True and event["endpoint"] == "responses/compact" and event["ref"] == REF
    assert event["messages"] == 2  # assistant a1, a2: the later user message is kept


async def test_a_summary_made_before_is_reused_and_its_originals_kept_alive(parts):
    refs, _ = parts
    await refs.save([Offload(REF, "history", "lines\n", 3)], [REF])
    done = await run_compact(parts, Compressed([SYSTEM, user("task"), SUMMARY], summary_at=2))
    assert done.ref == REF and done.written == set() and (done.tokens_in, done.tokens_out) == (0, 0)


async def test_the_same_history_gives_the_same_token(parts):
    record = [user("task"), SUMMARY]
    one = await run_compact(parts, Compressed(record, Offload(REF, "history", "x\n", 3), summary_at=1))
    two = await run_compact(parts, Compressed(record, summary_at=1))
    assert one.token == two.token


async def test_nothing_to_fold_stands_for_the_history_as_it_is(parts):
    _, records = parts
    done = await run_compact(parts, Compressed(), items=[user("task")])
    assert await records.load(done.token) == [user("task")] and done.kept_users == [user("task")]
    assert done.ref is None and done.tokens_before == done.tokens_after


async def test_an_empty_history_gives_a_token_standing_for_nothing(parts):
    _, records = parts
    done = await run_compact(parts, Compressed(), items=[])
    assert await records.load(done.token) == [] and done.kept_users == []


async def test_a_failed_summary_fails_the_compaction_and_stores_nothing(parts, tmp_path):
    with pytest.raises(CompactionFailed, match="upstream said no"):
        await run_compact(parts, Compressed(warning="compression skipped: upstream said no"))
