"""A `compaction_trigger` emulated (`proxy.formats.responses.trigger`, `proxy.turn._compact_now.compact_now`): which requests ask for it, what
is refused, and the compaction made by the emulated `/responses/compact`'s own `compact`."""

import pytest

from proxy.core.compaction import Offload
from proxy.core.compaction_token import PREFIX
from proxy.core.markers import history_marker
from proxy.core.provider_emulation import COMPACTION_ACTION
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.errors import ProxyError
from proxy.formats.responses import RESPONSES
from proxy.formats.responses.trigger import asked
from proxy.http.error_map import status_of
from proxy.offload.records import CompactionRecords, RefStore
from proxy.offload.summary_context import Compressed
from proxy.store import StoreUnavailable
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn._compact_now import CompactionFailed, compact_now

pytestmark = pytest.mark.anyio
VIEW = RESPONSES.view
REF = "abcdefgh12345678"
TRIGGER = {"type": "compaction_trigger"}


def user(text):
    return {"type": "message", "role": "user", "content": text}


def assistant(text):
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


ITEMS = [
    {"type": "message", "role": "developer", "content": "rules"},
    user("task"),
    assistant("a1 " * 500),
    user("later"),
    assistant("a2 " * 500),
]
SUMMARY = VIEW.summary_item(history_marker(REF, 3, 30) + "\nthe summary")


def ask(items, **body):
    return asked({"model": "gpt-5", "input": items, **body}, items, VIEW)


def refused(items, **body) -> ProxyError:
    with pytest.raises(ProxyError) as err:
        ask(items, **body)
    assert status_of(err.value) == 400
    return err.value


def test_an_input_ending_in_a_trigger_asks_for_a_compaction_now():
    assert ask([*ITEMS, TRIGGER]) is True
    assert ask(ITEMS) is False and ask([]) is False
    assert (
        ask([{"type": "compaction", "encrypted_content": "x"}, user("go on")]) is False
    )  # a compaction item is no trigger


@pytest.mark.parametrize(
    "items, at",
    [
        ([TRIGGER, *ITEMS], 0),
        ([*ITEMS[:2], TRIGGER, *ITEMS[2:]], 2),
        ([*ITEMS, TRIGGER, TRIGGER], 5),  # two triggers: the first is not last
        ([TRIGGER, TRIGGER], 0),
    ],
)
def test_a_trigger_that_is_not_the_last_item_is_refused_naming_it(items, at):
    err = refused(items)
    assert err.param == f"input[{at}]" and err.code == "invalid_value"
    assert "must be the final input item" in err.message


@pytest.mark.parametrize(
    "extra",
    [
        {"id": "ct_1"},
        {"id": 5},
        {"x": None},
        {"x": [1, 2]},
        {"x": {"type": "a"}},
        {"encrypted_content": "offload-compaction-v1:" + "A" * 43},
        {"": True},
    ],
)
def test_a_trigger_with_any_field_besides_its_type_is_refused_naming_the_field(extra):
    err = refused([*ITEMS, {**TRIGGER, **extra}])
    [name] = extra
    assert err.param == f"input[{len(ITEMS)}].{name}" and err.code == "unknown_parameter"


def test_a_field_name_is_clipped_in_the_error():
    err = refused([*ITEMS, {**TRIGGER, "k" * 10_000: 1}])
    assert len(err.param) < 100 and len(err.message) < 300


@pytest.mark.parametrize(
    "field, value",
    [
        ("previous_response_id", "resp_1"),
        ("conversation", "conv_1"),
        ("conversation", {"id": "conv_1"}),
        ("background", True),
    ],
)
def test_state_the_proxy_does_not_hold_is_refused_with_a_trigger(field, value):
    err = refused([*ITEMS, TRIGGER], **{field: value})
    assert err.param == field and err.code == "unsupported_parameter"
    assert ask(ITEMS, **{field: value}) is False  # without a trigger: the turn's business, not this one's


def test_background_false_is_no_refusal():
    assert ask([*ITEMS, TRIGGER], background=False, previous_response_id=None) is True


class Folding:
    def __init__(self, result: Compressed) -> None:
        self.result, self.seen = result, []

    async def fold(self, compacted, originals, settings, counter, *, keep_recent, cpu):
        self.seen.append((list(compacted), keep_recent))
        return self.result


@pytest.fixture
def parts(tmp_path):
    store = SQLiteStore(tmp_path)
    return RefStore(store, "ns", 3600, sealer=Sealer(None)), CompactionRecords(store, "ns", 3600, sealer=Sealer(None))


async def run(parts, folder, items):
    refs, records = parts
    return await compact_now(
        items,
        compaction=RESPONSES.compaction_emulation,
        view=VIEW,
        endpoint="responses",
        settings=OffloadSettings(),
        counter=counter_for_model("gpt-5"),
        refs=refs,
        records=records,
        compressor=lambda: folder,
    )


async def test_the_history_before_the_trigger_is_compacted_and_answered_as_one_compaction_item(parts):
    refs, records = parts
    record = [ITEMS[0], user("task"), SUMMARY, user("later")]
    folder = Folding(
        Compressed(record, Offload(REF, "history", "lines\n", 30), summary_at=2, usage_in=300, usage_out=40)
    )
    prepared, answer = await run(parts, folder, [*ITEMS, TRIGGER])
    assert folder.seen == [(ITEMS, 0)]  # the trigger is not compacted; everything folded, nothing kept apart
    [item] = answer.lead
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(PREFIX)
    assert item["id"].startswith("cmp_") and set(item) == {"id", "type", "encrypted_content"}
    assert answer.paused and (answer.tokens_in, answer.tokens_out) == (300, 40)
    assert await records.load(item["encrypted_content"]) == record  # what the token stands for
    assert (await refs.load(REF)).text == "lines\n"
    assert prepared.action == COMPACTION_ACTION and prepared.written == {REF} and prepared.summary_tokens == 340
    assert prepared.plan.refs == [REF] and prepared.plan.tokens_after < prepared.plan.tokens_before
    [done] = [e for e in prepared.events if e["type"] == "provider_compaction"]
    assert done["endpoint"] == "responses" and done["emulated"] is True


async def test_nothing_before_the_trigger_is_a_400(parts):
    with pytest.raises(ProxyError) as err:
        await run(parts, Folding(Compressed()), [TRIGGER])
    assert (status_of(err.value), err.value.param) == (400, "input")


async def test_no_summariser_or_no_summary_fails_the_compaction(parts):
    with pytest.raises(CompactionFailed, match="no summariser"):
        await run(parts, None, [*ITEMS, TRIGGER])
    with pytest.raises(CompactionFailed, match="upstream said no"):
        await run(parts, Folding(Compressed(warning="compression skipped: upstream said no")), [*ITEMS, TRIGGER])


async def test_a_store_that_is_down_is_a_503_saying_the_compaction_failed(parts):
    class Down:
        async def save(self, record):
            raise StoreUnavailable("connection refused")

    refs, _ = parts
    folder = Folding(Compressed([user("task"), SUMMARY], summary_at=1))
    with pytest.raises(ProxyError) as err:
        await compact_now(
            [*ITEMS, TRIGGER],
            compaction=RESPONSES.compaction_emulation,
            view=VIEW,
            endpoint="responses",
            settings=OffloadSettings(),
            counter=counter_for_model("gpt-5"),
            refs=refs,
            records=Down(),
            compressor=lambda: folder,
        )
    assert (status_of(err.value), err.value.code) == (503, "store_unavailable")
    assert err.value.message.startswith("The compaction failed")
