"""OpenAI's compaction emulated (`proxy.formats.responses._compaction`): the emulation, `compaction`
items carrying the proxy's tokens, `compaction_trigger`, and `POST /v1/responses/compact`'s shapes."""

from __future__ import annotations

import json
from typing import Any

import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses.compacted_response import CompactedResponse

from proxy.core import jsonio
from proxy.core.compaction import COMPACTION_ACTION, PREFIX, Offload, TokenError, plan_compaction, present_refs
from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_marker, is_marker, refs_in
from proxy.core.tokens import counter_for_model
from proxy.errors import ProxyError
from proxy.formats.responses import RESPONSES
from proxy.formats.responses._compaction import (
    asked,
    compacted_response,
    compaction_item,
    output_message,
    parse_compact_body,
    replace_tokens,
    summary_body,
    triggered_events,
    triggered_response,
)
from proxy.formats.responses._items import ResponsesView
from proxy.http.error_map import status_of
from proxy.offload.records import CompactionRecords, RefStore
from proxy.offload.summarizer import Compressed
from proxy.store import StoreUnavailable
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn._context_management import CompactionFailed, begin, compact_now
from tests.harness.history import big_text_over

# --- responses_compaction ---
# Compaction of every Responses item that carries a tool's output (the README's list).
#
# One table: each output-bearing item type, a call before it where it has one, a 4.8 K-token
# output. The output is replaced in place by a marker with `ref=` (every other field and the
# item's position kept), the same item in a later, longer turn gets the very same bytes, and the
# marker's ref names the stored text. The items the README says are kept stay verbatim.

VIEW = ResponsesView({"context_reload", "context_search"})
COUNTER = counter_for_model("gpt-4o")
NS = "b" * 32
SETTINGS = OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=500)
BIG = big_text_over(4_800, COUNTER)  # 4.8 K tokens by the counter in use (tiktoken or the estimate)
USER = {"role": "user", "content": "Go on."}

# (name, the call before the output or None, the output item, the text that is offloaded)
OFFLOADED: list[tuple[str, dict | None, dict, str]] = [
    (
        "function_call_output",
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": BIG},
        BIG,
    ),
    (
        "function_call_output parts",
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "read", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": BIG}, {"type": "input_image", "image_url": "data:,"}],
        },
        BIG,
    ),
    (
        "custom_tool_call_output",
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c3", "name": "apply_patch", "input": "*** Begin"},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": BIG},
        BIG,
    ),
    (
        "custom_tool_call_output parts",
        {"type": "custom_tool_call", "id": "ctc_2", "call_id": "c4", "name": "apply_patch", "input": "*** Begin"},
        {"type": "custom_tool_call_output", "call_id": "c4", "output": [{"type": "input_text", "text": BIG}]},
        BIG,
    ),
    (
        "local_shell_call_output",
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "c5",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
        {"type": "local_shell_call_output", "id": "c5", "output": BIG},
        BIG,
    ),
    (
        "apply_patch_call_output",
        {
            "type": "apply_patch_call",
            "id": "apc_1",
            "call_id": "c6",
            "status": "completed",
            "operation": {"type": "update_file", "path": "a.py", "diff": "@@"},
        },
        {"type": "apply_patch_call_output", "call_id": "c6", "status": "completed", "output": BIG},
        BIG,
    ),
    (
        "mcp_call",
        None,
        {
            "type": "mcp_call",
            "id": "mcp_1",
            "server_label": "deepwiki",
            "name": "ask_question",
            "arguments": '{"q": "x"}',
            "output": BIG,
            "error": None,
            "status": "completed",
        },
        BIG,
    ),
]

# Outputs without offloadable text (README: kept as they are).
KEPT: list[tuple[str, dict, dict]] = [
    (
        "computer_call_output",
        {
            "type": "computer_call",
            "id": "cu_1",
            "call_id": "c7",
            "status": "completed",
            "action": {"type": "screenshot"},
            "pending_safety_checks": [],
        },
        {
            "type": "computer_call_output",
            "call_id": "c7",
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "A" * 20_000},
        },
    ),
    (
        "shell_call_output",
        {"type": "shell_call", "id": "sh_1", "call_id": "c8", "status": "completed", "action": {"commands": ["ls"]}},
        {
            "type": "shell_call_output",
            "call_id": "c8",
            "output": [{"stdout": BIG, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
    ),
]


def turn(call: dict | None, output: dict, later: int = 0) -> list[Any]:
    """user, the call (if any), its output, a user message, then `later` more user messages."""
    return [
        USER,
        *([call] if call else []),
        output,
        USER,
        *([{"role": "user", "content": f"and {i}"} for i in range(later)]),
    ]


def plan(items: list[Any]):
    return plan_compaction(items, VIEW, SETTINGS, counter=COUNTER, namespace=NS)


@pytest.mark.parametrize(("name", "call", "output", "text"), OFFLOADED, ids=[row[0] for row in OFFLOADED])
def test_every_listed_output_is_offloaded_in_place(name: str, call: dict | None, output: dict, text: str) -> None:
    assert COUNTER.text(text) > 4_500
    items = turn(call, output)
    result = plan(items)
    position = items.index(output)
    assert len(result.items) == len(items) and [o.text for o in result.offloads] == [text]
    replaced = result.items[position]
    marker = VIEW.tool_text(replaced)
    assert marker is not None and is_marker(marker) and len(marker) < 2_000
    assert refs_in(marker) == [result.offloads[0].ref] == present_refs(result.items, VIEW)
    assert list(replaced) == list(output)  # the same keys, in the same order
    assert {k: v for k, v in replaced.items() if k != "output"} == {k: v for k, v in output.items() if k != "output"}
    for i, item in enumerate(items):
        if i != position:
            assert result.items[i] is item
    # planned again (the next turn sends the compacted item back): nothing changes
    assert plan(result.items).items == result.items and not plan(result.items).offloads
    # the same item in a later, longer turn becomes the very same bytes
    later = plan(turn(call, output, later=3))
    assert json.dumps(later.items[position]) == json.dumps(replaced)


@pytest.mark.parametrize(("name", "call", "output"), KEPT, ids=[row[0] for row in KEPT])
def test_outputs_without_offloadable_text_are_kept(name: str, call: dict, output: dict) -> None:
    items = [{"role": "user", "content": BIG}, *turn(call, output)]  # over the threshold whatever an image counts
    result = plan(items)
    assert result.tokens_before > SETTINGS.max_total_tokens
    assert result.items == items and not result.offloads


def test_an_mcp_call_beside_a_function_call_output_both_offloaded() -> None:
    """The report's case: a 4.8 K-token mcp_call output beside a 4.8 K-token function_call_output."""
    mcp_call = next(row[2] for row in OFFLOADED if row[0] == "mcp_call")
    _, call, output, _ = OFFLOADED[0]
    items = [USER, mcp_call, call, output, USER]
    result = plan(items)
    assert len(result.offloads) == 2
    assert is_marker(result.items[1]["output"]) and is_marker(result.items[3]["output"])
    assert {k: v for k, v in result.items[1].items() if k != "output"} == {
        k: v for k, v in mcp_call.items() if k != "output"
    }


# --- responses_compaction_items ---
# The proxy's compaction tokens: stored records, and their replacement in a Responses input.

pytestmark = pytest.mark.anyio
ITEMS_VIEW = RESPONSES.view
ITEMS_SUMMARY = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "[summary] ref=abcdef12"}],
}


def user(text):
    return {"type": "message", "role": "user", "content": text}


def compaction(content):
    return {"type": "compaction", "id": "cmp_1", "encrypted_content": content}


@pytest.fixture
def store(tmp_path):
    return SQLiteStore(tmp_path)


def records(store, namespace="ns-a", secret=None):
    return CompactionRecords(store, namespace, 3600, sealer=Sealer(secret), secret=secret)


async def test_a_record_round_trips_and_is_stored_once(store):
    mine = records(store, secret="k" * 32)
    token = await mine.save([ITEMS_SUMMARY])
    assert token.startswith(PREFIX)
    assert await mine.save([ITEMS_SUMMARY]) == token
    assert await mine.load(token) == [ITEMS_SUMMARY]
    with pytest.raises(TokenError):
        await records(store, "ns-b", secret="k" * 32).load(token)


async def test_the_newest_token_is_replaced_and_what_precedes_it_dropped(store):
    mine = records(store)
    token = await mine.save([ITEMS_SUMMARY])
    system = {"type": "message", "role": "developer", "content": "rules"}
    items = [system, user("old"), compaction(token), user("next")]
    out = await replace_tokens(items, ITEMS_VIEW, mine, emulating=True)
    assert out == [system, ITEMS_SUMMARY, user("next")]


async def test_no_compaction_item_changes_nothing(store):
    assert await replace_tokens([user("a")], ITEMS_VIEW, records(store), emulating=True) is None


async def test_a_provider_token_is_relayed_natively_and_refused_when_emulating(store):
    items = [user("a"), compaction("gAAAAABprovider"), user("b")]
    assert await replace_tokens(items, ITEMS_VIEW, records(store), emulating=False) is None
    with pytest.raises(ProxyError) as refused:
        await replace_tokens(items, ITEMS_VIEW, records(store), emulating=True)
    assert status_of(refused.value) == 400 and refused.value.param == "input[1].encrypted_content"


async def test_our_older_token_before_a_provider_one_is_dropped_when_relaying(store):
    token = await records(store).save([ITEMS_SUMMARY])
    items = [compaction(token), user("a"), compaction("gAAAAABprovider"), user("b")]
    out = await replace_tokens(items, ITEMS_VIEW, records(store), emulating=False)
    assert out == items[1:]


@pytest.mark.parametrize("emulating", [True, False])
async def test_another_namespaces_token_a_forged_one_and_an_expired_one_are_400(store, emulating):
    theirs = await records(store, "ns-b").save([ITEMS_SUMMARY])
    for token, why in [
        (theirs, "not issued to this credential"),
        (PREFIX + "AAAA", "not a compaction token"),
        (PREFIX[:-1] + "7:x", "version"),
    ]:
        with pytest.raises(ProxyError, match=why):
            await replace_tokens([compaction(token)], ITEMS_VIEW, records(store), emulating=emulating)
    mine = records(store)
    token = await mine.save([ITEMS_SUMMARY])
    await store.delete(mine._key(token_id(mine, token)))
    with pytest.raises(ProxyError, match="no longer holds"):
        await replace_tokens([compaction(token)], ITEMS_VIEW, mine, emulating=emulating)


def token_id(mine, token):
    from proxy.core.compaction import read_token

    return read_token(token, mine.namespace, mine.secret)


async def test_begin_takes_context_management_out_only_when_emulating(store):
    body = {"model": "m", "input": [user("a")], "context_management": [{"type": "compaction"}]}
    relayed = await begin(body, body["input"], fmt=RESPONSES, emulating=False, records=records(store))
    assert relayed.body is body and relayed.asked is None and not relayed.changed
    emulated = await begin(body, body["input"], fmt=RESPONSES, emulating=True, records=records(store))
    assert "context_management" not in emulated.body and emulated.asked == [{"type": "compaction"}]
    assert emulated.changed


@pytest.mark.parametrize("emulating", [True, False])
async def test_a_token_outside_a_compaction_item_is_a_400_and_in_text_is_content(store, emulating):
    mine = records(store)
    token = await mine.save([ITEMS_SUMMARY])
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": token}
    nested = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "compaction", "encrypted_content": token}],
    }
    for item, param in [(reasoning, "input[1].encrypted_content"), (nested, "input[1].output[0].encrypted_content")]:
        body = {"model": "m", "input": [user("a"), item, user("b")]}
        with pytest.raises(ProxyError) as refused:
            await begin(body, RESPONSES.history(body), fmt=RESPONSES, emulating=emulating, records=mine)
        assert status_of(refused.value) == 400 and refused.value.param == param
    body = {"model": "m", "input": [user(f"pasted {token}"), compaction(token.upper())]}
    with pytest.raises(ProxyError, match="exact spelling"):  # a compaction item: read, and not canonical
        await begin(body, RESPONSES.history(body), fmt=RESPONSES, emulating=emulating, records=mine)
    body = {"model": "m", "input": [user(f"pasted {token}"), user("b")]}
    begun = await begin(body, RESPONSES.history(body), fmt=RESPONSES, emulating=emulating, records=mine)
    assert begun.items == body["input"]  # text: content, as sent


async def test_a_chat_message_carrying_a_token_is_a_400(store):
    from proxy.formats.chat import CHAT

    token = await records(store).save([ITEMS_SUMMARY])
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "encrypted_content": token}]}],
    }
    with pytest.raises(ProxyError) as refused:
        await begin(body, CHAT.history(body), fmt=CHAT, emulating=False, records=records(store))
    assert refused.value.param == "messages[0].content[0].encrypted_content"


async def test_a_large_input_is_checked_after_its_token_is_replaced_off_the_loop(store, monkeypatch):
    """The check that what a record brought holds no token walks the whole input: for a large
    body it runs in the CPU pool (1.5 M empty objects beside a token held /healthz 2-4 s)."""
    import json
    import threading

    from proxy.turn import _context_management as emulation_request

    threads: list[str] = []
    stray = emulation_request._stray

    def spy(value, **kwargs):
        threads.append(threading.current_thread().name)
        return stray(value, **kwargs)

    monkeypatch.setattr(emulation_request, "_stray", spy)
    mine = records(store)
    token = await mine.save([ITEMS_SUMMARY])
    body = {
        "model": "m",
        "input": [compaction(token), user("x" * (2 << 20)), {"type": "reasoning", "encrypted_content": "g"}],
    }
    raw = json.dumps(body).encode()
    begun = await begin(body, body["input"], fmt=RESPONSES, emulating=False, records=mine, raw=jsonio.RawJson.of(raw))
    assert begun.replaced and begun.items[0] == ITEMS_SUMMARY
    assert len(threads) == 2 and all(name.startswith("offload-cpu") for name in threads), threads


# --- responses_trigger ---
# A `compaction_trigger` emulated (`proxy.formats.responses._compaction`, `proxy.turn._context_management.compact_now`): which requests ask for it, what
# is refused, and the compaction made by the emulated `/responses/compact`'s own `compact`.

TRIGGER_VIEW = RESPONSES.view
REF = "abcdefgh12345678"
TRIGGER = {"type": "compaction_trigger"}


def assistant(text):
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


ITEMS = [
    {"type": "message", "role": "developer", "content": "rules"},
    user("task"),
    assistant("a1 " * 500),
    user("later"),
    assistant("a2 " * 500),
]
TRIGGER_SUMMARY = TRIGGER_VIEW.summary_item(history_marker(REF, 3, 30) + "\nthe summary")


def ask(items, **body):
    return asked({"model": "gpt-5", "input": items, **body}, items, TRIGGER_VIEW)


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
        view=TRIGGER_VIEW,
        endpoint="responses",
        settings=OffloadSettings(),
        counter=counter_for_model("gpt-5"),
        refs=refs,
        records=records,
        compressor=lambda: folder,
    )


async def test_the_history_before_the_trigger_is_compacted_and_answered_as_one_compaction_item(parts):
    refs, records = parts
    record = [ITEMS[0], user("task"), TRIGGER_SUMMARY, user("later")]
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
        async def admit(self) -> None:  # the caller is admitted: the store itself is down
            pass

        async def save(self, record):
            raise StoreUnavailable("connection refused")

    refs, _ = parts
    folder = Folding(Compressed([user("task"), TRIGGER_SUMMARY], summary_at=1))
    with pytest.raises(ProxyError) as err:
        await compact_now(
            [*ITEMS, TRIGGER],
            compaction=RESPONSES.compaction_emulation,
            view=TRIGGER_VIEW,
            endpoint="responses",
            settings=OffloadSettings(),
            counter=counter_for_model("gpt-5"),
            refs=refs,
            records=Down(),
            compressor=lambda: folder,
        )
    assert (status_of(err.value), err.value.code) == (503, "store_unavailable")
    assert err.value.message.startswith("The compaction failed")


# --- responses_compact ---
# `POST /v1/responses/compact` bodies and answers in OpenAI's shapes, and the answer to a
# `compaction_trigger` (a Response, or its stream).

TOKEN = "offload-compaction-v1:" + "A" * 43


def parse(body, **kwargs):
    return parse_compact_body(json.dumps(body).encode(), **kwargs)


def test_a_body_with_model_and_input_parses():
    body = {"model": "gpt-5", "input": "hi", "instructions": "x", "prompt_cache_key": "k", "image": {"a": 1}}
    assert parse(body) == body


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": "hi"}, "model"),
        ({"model": None, "input": "hi"}, "model"),
        ({"model": "gpt-5"}, "input"),
        ({"model": 5, "input": "hi"}, "model"),
        ({"model": "gpt-5", "input": 5}, "input"),
        ({"model": "gpt-5", "input": [5]}, "input[0]"),
        ({"model": "gpt-5", "input": "hi", "instructions": ["x"]}, "instructions"),
        ({"model": "gpt-5", "input": "hi", "previous_response_id": {}}, "previous_response_id"),
        ({"model": "gpt-5", "input": [{"role": "user", "content": {"x": 1}}]}, "input[0].content"),
    ],
)
def test_a_wrong_or_missing_field_is_a_400_naming_it(body, param):
    with pytest.raises(ProxyError) as err:
        parse(body)
    assert status_of(err.value) == 400 and err.value.param == param


def test_more_items_than_allowed_is_a_400():
    with pytest.raises(ProxyError) as err:
        parse({"model": "m", "input": [{"role": "user", "content": "x"}] * 3}, max_items=2)
    assert err.value.code == "too_many_messages"


def test_previous_response_id_alone_parses_for_the_caller_to_decide():
    assert parse({"model": "m", "previous_response_id": "resp_1"})["previous_response_id"] == "resp_1"


def test_the_summary_calls_take_only_what_responses_create_accepts():
    body = {
        "model": "m",
        "input": [],
        "instructions": "i",
        "image": {"context_compression": "enabled"},
        "prompt_cache_options": {},
        "service_tier": "flex",
    }
    assert summary_body(body) == {"model": "m", "instructions": "i", "service_tier": "flex", "input": []}


def test_a_user_message_becomes_an_output_item_with_parts():
    assert output_message({"role": "user", "content": "hi"}) == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hi"}],
    }
    item = {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "u"}], "id": "m1"}
    assert output_message(item) == item


def test_the_answer_is_deterministic_in_its_token_and_parses_with_the_sdk():
    one = compacted_response(TOKEN, [{"role": "user", "content": "task"}], created_at=1, tokens_in=3, tokens_out=2)
    two = compacted_response(TOKEN, [{"role": "user", "content": "task"}], created_at=1, tokens_in=3, tokens_out=2)
    assert one == two and one["id"] != compacted_response(TOKEN + "B", [], created_at=1)["id"]
    assert one["output"][-1] == compaction_item(TOKEN) and one["output"][-1]["id"].startswith("cmp_")
    parsed = openai._models.construct_type(type_=CompactedResponse, value=one)
    assert parsed.object == "response.compaction" and parsed.output[-1].encrypted_content == TOKEN
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens, parsed.usage.total_tokens) == (3, 2, 5)
    CompactedResponse.model_validate({**one, "output": one["output"][-1:]})  # strictly valid, the item included


CODEX_REQUEST = {  # what Codex 0.171 sends with its compaction_trigger (trimmed)
    "model": "gpt-5-codex",
    "instructions": "You are Codex.",
    "input": [],
    "stream": True,
    "store": False,
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}, "strict": False}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "01a2",
    "client_metadata": {"x": "y"},
}


def test_a_trigger_is_answered_a_completed_response_whose_output_is_the_compaction_item_alone():
    lead = [compaction_item(TOKEN)]
    answer = triggered_response(lead, request=CODEX_REQUEST, created_at=7, tokens_in=300, tokens_out=40)
    assert answer["output"] == lead and answer["status"] == "completed" and answer["object"] == "response"
    assert answer["model"] == "gpt-5-codex" and answer["created_at"] == 7
    assert (answer["tools"], answer["store"], answer["instructions"]) == (
        CODEX_REQUEST["tools"],
        False,
        "You are Codex.",
    )
    assert answer["parallel_tool_calls"] is False and answer["reasoning"] == CODEX_REQUEST["reasoning"]
    assert "include" not in answer and "client_metadata" not in answer and "input" not in answer
    assert answer == triggered_response(lead, request=CODEX_REQUEST, created_at=7, tokens_in=300, tokens_out=40)
    assert (
        answer["id"].startswith("resp_")
        and answer["id"]
        != triggered_response([compaction_item(TOKEN + "B")], request=CODEX_REQUEST, created_at=7)["id"]
    )
    parsed = Response.model_validate(answer)  # strictly valid for the openai SDK
    assert parsed.output[0].type == "compaction" and parsed.output[0].encrypted_content == TOKEN
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens, parsed.usage.total_tokens) == (300, 40, 340)


def test_a_request_with_few_fields_gets_the_apis_defaults():
    answer = triggered_response([compaction_item(TOKEN)], request={"model": 5}, created_at=1)
    assert answer["model"] == "unknown" and answer["tools"] == [] and answer["store"] is True
    assert answer["usage"]["total_tokens"] == 0
    Response.model_validate(answer)


def test_the_stream_is_the_event_sequence_openai_sends_for_it():
    answer = triggered_response(
        [compaction_item(TOKEN)], request=CODEX_REQUEST, created_at=7, tokens_in=3, tokens_out=2
    )
    events = triggered_events(answer)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == [0, 1, 2, 3, 4]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert events[0]["response"]["usage"] is None and events[0]["response"]["id"] == answer["id"]
    assert events[2]["output_index"] == events[3]["output_index"] == 0
    assert events[3]["item"] == compaction_item(TOKEN) and events[-1]["response"] == answer
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    parsed = [adapter.validate_python(e) for e in events]  # every event as the SDK reads it
    assert parsed[3].item.encrypted_content == TOKEN and parsed[-1].response.usage.total_tokens == 5
