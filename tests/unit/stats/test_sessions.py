"""Sessions derived from the conversation: stable over its turns, different between
conversations and tenants, blind to the cache_control markers a client moves every turn.

Which session a stored Responses answer belongs to (`proxy.stats._sessions`).
"""

from __future__ import annotations

import pytest

from proxy.formats.chat import CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from proxy.stats._sessions import MAX_ID_CHARS, Replies, session_from_history, session_from_name
from proxy.store.memory import MemoryStore
from proxy.store.sealing import Sealer

A, B = "a" * 32, "b" * 32


def chat(*later: dict, first: str = "fix the bug") -> list[dict]:
    return [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": first}, *later]


def test_chat_turns_of_one_conversation_share_a_session():
    role = CHAT.view.role
    turn1 = chat()
    turn2 = chat({"role": "assistant", "content": "on it"}, {"role": "user", "content": "and now?"})
    turn3 = turn2 + [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "go"}]
    ids = {session_from_history(A, t, role) for t in (turn1, turn2, turn3)}
    assert len(ids) == 1
    [sid] = ids
    assert sid.startswith("auto-") and len(sid) == 5 + 16 and int(sid[5:], 16) >= 0
    assert session_from_history(A, chat(first="another task"), role) != sid
    assert session_from_history(B, turn1, role) != sid  # another tenant's
    other_system = [{"role": "system", "content": "Another agent."}, *turn1[1:]]
    assert session_from_history(A, other_system, role) != sid
    assert session_from_history(A, [], role) is None


def test_responses_input_and_instructions():
    role = RESPONSES.view.role
    first = [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]
    later = first + [
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a b"},
    ]
    assert session_from_history(A, first, role, system=(None, "be brief")) == session_from_history(
        A, later, role, system=(None, "be brief")
    )
    assert session_from_history(A, first, role, system=(None, "be brief")) != session_from_history(
        A, first, role, system=(None, "be long")
    )
    # a developer message first, then the user's: both are the start
    dev = [{"type": "message", "role": "developer", "content": "rules"}, *first]
    assert session_from_history(A, dev, role) != session_from_history(A, first, role)
    assert session_from_history(A, dev + later[1:], role) == session_from_history(A, dev, role)


def test_anthropic_system_and_moving_cache_control():
    role = MESSAGES.view.role
    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    user = {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "fix it", "cache_control": {"type": "ephemeral"}},
        ],
    }
    turn1 = [user]
    plain_user = {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "fix it"},
        ],
    }
    turn2 = [
        plain_user,
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}]},
    ]
    plain_system = [{"type": "text", "text": "You are Claude Code."}]
    assert session_from_history(A, turn1, role, system=(system, None)) == session_from_history(
        A, turn2, role, system=(plain_system, None)
    )
    assert session_from_history(A, turn1, role, system=(system, None)) != session_from_history(
        A, turn1, role, system=("Another prompt", None)
    )


def test_no_user_message_hashes_the_first_items():
    role = CHAT.view.role
    items = [{"role": "system", "content": f"s{i}"} for i in range(40)]
    assert session_from_history(A, items, role) == session_from_history(
        A, items[:32] + [{"role": "user", "content": "x"}], role
    )


def test_named_sessions():
    assert session_from_name(A, "conversation", "conv_1") == session_from_name(A, "conversation", "conv_1")
    assert session_from_name(A, "conversation", "conv_1") != session_from_name(A, "response", "conv_1")
    assert session_from_name(A, "conversation", "conv_1") != session_from_name(B, "conversation", "conv_1")
    assert session_from_name(A, "response", "resp_1").startswith("auto-")


pytestmark = pytest.mark.anyio
NS = "n" * 32


async def test_a_noted_link_is_found_before_the_store_has_it():
    """The turn continuing from an answer can come before its link is written to the store."""
    replies, store = Replies(), MemoryStore()
    replies.note(NS, "resp_1", session="s-1")
    assert await replies.find(store, NS, "resp_1", sealer=Sealer(None)) == "s-1"
    assert await Replies().find(store, NS, "resp_1", sealer=Sealer(None)) is None  # another worker: the store only


async def test_a_remembered_link_is_found_by_another_worker():
    store = MemoryStore()
    await Replies().remember(store, NS, "resp_2", session="s-2", ttl=60, sealer=Sealer(None))
    assert await Replies().find(store, NS, "resp_2", sealer=Sealer(None)) == "s-2"
    assert await Replies().find(store, "o" * 32, "resp_2", sealer=Sealer(None)) is None  # another tenant's


async def test_bounded_and_long_ids_ignored():
    replies = Replies(max_known=2)
    for n in range(3):
        replies.note(NS, f"resp_{n}", session=f"s{n}")
    store = MemoryStore()
    assert [await replies.find(store, NS, f"resp_{n}", sealer=Sealer(None)) for n in range(3)] == [None, "s1", "s2"]
    replies.note(NS, "r" * (MAX_ID_CHARS + 1), session="x")
    assert await replies.find(store, NS, "r" * (MAX_ID_CHARS + 1), sealer=Sealer(None)) is None
