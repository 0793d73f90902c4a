"""The emulated compaction: fold, store the originals and the record, what the client keeps."""

import pytest

from proxy.core.compaction import PREFIX, Offload
from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_marker
from proxy.core.tokens import counter_for_model
from proxy.formats.responses import RESPONSES
from proxy.offload.records import CompactionRecords, RefStore
from proxy.offload.summarizer import Compressed
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn._context_management import CompactionFailed, compact

pytestmark = pytest.mark.anyio
VIEW = RESPONSES.view
REF = "abcdefgh12345678"


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


async def run(parts, result, items=ITEMS):
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
    done = await run(
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
    done = await run(parts, Compressed([SYSTEM, user("task"), SUMMARY], summary_at=2))
    assert done.ref == REF and done.written == set() and (done.tokens_in, done.tokens_out) == (0, 0)


async def test_the_same_history_gives_the_same_token(parts):
    record = [user("task"), SUMMARY]
    one = await run(parts, Compressed(record, Offload(REF, "history", "x\n", 3), summary_at=1))
    two = await run(parts, Compressed(record, summary_at=1))
    assert one.token == two.token


async def test_nothing_to_fold_stands_for_the_history_as_it_is(parts):
    _, records = parts
    done = await run(parts, Compressed(), items=[user("task")])
    assert await records.load(done.token) == [user("task")] and done.kept_users == [user("task")]
    assert done.ref is None and done.tokens_before == done.tokens_after


async def test_an_empty_history_gives_a_token_standing_for_nothing(parts):
    _, records = parts
    done = await run(parts, Compressed(), items=[])
    assert await records.load(done.token) == [] and done.kept_users == []


async def test_a_failed_summary_fails_the_compaction_and_stores_nothing(parts, tmp_path):
    with pytest.raises(CompactionFailed, match="upstream said no"):
        await run(parts, Compressed(warning="compression skipped: upstream said no"))
