"""Sessions derived from the conversation: stable over its turns, different between
conversations and tenants, blind to the cache_control markers a client moves every turn."""

from __future__ import annotations

from proxy.formats.chat import CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from proxy.stats.session_id import from_history, from_name

A, B = "a" * 32, "b" * 32


def chat(*later: dict, first: str = "fix the bug") -> list[dict]:
    return [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": first}, *later]


def test_chat_turns_of_one_conversation_share_a_session():
    role = CHAT.view.role
    turn1 = chat()
    turn2 = chat({"role": "assistant", "content": "on it"}, {"role": "user", "content": "and now?"})
    turn3 = turn2 + [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "go"}]
    ids = {from_history(A, t, role) for t in (turn1, turn2, turn3)}
    assert len(ids) == 1
    [sid] = ids
    assert sid.startswith("auto-") and len(sid) == 5 + 16 and int(sid[5:], 16) >= 0
    assert from_history(A, chat(first="another task"), role) != sid
    assert from_history(B, turn1, role) != sid  # another tenant's
    other_system = [{"role": "system", "content": "Another agent."}, *turn1[1:]]
    assert from_history(A, other_system, role) != sid
    assert from_history(A, [], role) is None


def test_responses_input_and_instructions():
    role = RESPONSES.view.role
    first = [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]
    later = first + [
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a b"},
    ]
    assert from_history(A, first, role, system=(None, "be brief")) == from_history(
        A, later, role, system=(None, "be brief")
    )
    assert from_history(A, first, role, system=(None, "be brief")) != from_history(
        A, first, role, system=(None, "be long")
    )
    # a developer message first, then the user's: both are the start
    dev = [{"type": "message", "role": "developer", "content": "rules"}, *first]
    assert from_history(A, dev, role) != from_history(A, first, role)
    assert from_history(A, dev + later[1:], role) == from_history(A, dev, role)


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
    assert from_history(A, turn1, role, system=(system, None)) == from_history(
        A, turn2, role, system=(plain_system, None)
    )
    assert from_history(A, turn1, role, system=(system, None)) != from_history(
        A, turn1, role, system=("Another prompt", None)
    )


def test_no_user_message_hashes_the_first_items():
    role = CHAT.view.role
    items = [{"role": "system", "content": f"s{i}"} for i in range(40)]
    assert from_history(A, items, role) == from_history(A, items[:32] + [{"role": "user", "content": "x"}], role)


def test_named_sessions():
    assert from_name(A, "conversation", "conv_1") == from_name(A, "conversation", "conv_1")
    assert from_name(A, "conversation", "conv_1") != from_name(A, "response", "conv_1")
    assert from_name(A, "conversation", "conv_1") != from_name(B, "conversation", "conv_1")
    assert from_name(A, "response", "resp_1").startswith("auto-")
