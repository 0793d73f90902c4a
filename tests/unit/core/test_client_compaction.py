"""Recognising a client's own compaction request, and the thresholds its turn gets."""

from __future__ import annotations

import pytest

from proxy.core import client_compaction as cc
from proxy.core.settings import OffloadSettings
from proxy.formats.chat import VIEW as CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.messages import history as messages_history
from proxy.formats.responses import RESPONSES

CLAUDE = (
    "Your task is to create a detailed summary of the conversation so far, paying close attention to the "
    "user's explicit requests and your previous actions."
)
CODEX = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM."
EARLIER = [{"role": "user", "content": "fix the bug"}, {"role": "assistant", "content": "done"}]


def test_claude_code_in_the_messages_format_even_after_a_reminder():
    body = {
        "messages": [
            *EARLIER,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>files changed</system-reminder>"},
                    {"type": "text", "text": CLAUDE.replace(" ", "\n  ", 3)},
                ],
            },
        ]
    }
    assert cc.asked(messages_history(body), MESSAGES.view) == "claude-code"


def test_codex_in_the_responses_format():
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": CODEX.lower()}]},
    ]
    assert cc.asked(items, RESPONSES.view) == "codex"


@pytest.mark.parametrize(
    "messages",
    [
        [*EARLIER, {"role": "user", "content": "what is next?"}],
        [{"role": "user", "content": CLAUDE}, {"role": "assistant", "content": "<summary>…</summary>"}],  # answered
        [*EARLIER, {"role": "user", "content": CLAUDE + "x" * 50_000}],  # past what is read
        [],
        [{"role": "user", "content": None}],
        [{"role": "user", "content": [{"type": "image_url"}]}],
    ],
)
def test_anything_else_is_not_a_compaction(messages):
    assert cc.asked(messages, CHAT) is None


def test_claude_code_after_a_tool_round_in_one_user_message():
    """What Claude Code 2.x sends for `/compact` after a Bash call (seen through the proxy)."""
    body = {
        "messages": [
            *EARLIER,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat notes.txt"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "note\n" * 5000},
                    {"type": "text", "text": "CRITICAL: Respond with TEXT ONLY.\n\n" + CLAUDE},
                ],
            },
        ]
    }
    assert cc.asked(messages_history(body), MESSAGES.view) == "claude-code"


def test_only_the_last_items_are_looked_at():
    many = [*EARLIER, {"role": "user", "content": CLAUDE}, *({"role": "user", "content": "more"} for _ in range(8))]
    assert cc.asked(many, CHAT) is None
    assert cc.asked(many[:-1], CHAT) == "claude-code"


def test_the_window_becomes_every_threshold():
    settings = OffloadSettings()
    got = cc.settings_for(settings, model="claude-sonnet-4-5", output=32_000)
    budget = int(200_000 * cc.FILL)  # the output fits in the rest
    assert cc.settings_for(settings, model="claude-sonnet-4-5", output=128_000).max_total_tokens == 72_000
    assert (got.max_total_tokens, got.hard_max_tokens) == (budget,) * 2
    assert got.precompress_ratio == 0 and got.mode == settings.mode
    # what a result must reach to be compacted once the history is past the trigger: unchanged
    assert (got.tool_result_limit(), got.max_fresh_tool_message_tokens) == (
        settings.tool_result_limit(),
        settings.max_fresh_tool_message_tokens,
    )
    unknown = cc.settings_for(settings, model="my-local-model", output=16_000)
    assert unknown.max_total_tokens == int(cc.DEFAULT_WINDOW * cc.FILL)
    tiny = cc.settings_for(settings, model="gpt-3.5-turbo", output=16_000)  # never below the proxy's own trigger
    assert tiny.max_total_tokens == settings.max_total_tokens


@pytest.mark.parametrize("mode", ["off", "observe"])
def test_a_mode_that_offloads_nothing_is_left_alone(mode):
    settings = OffloadSettings(mode=mode)
    assert cc.settings_for(settings, model="gpt-4o", output=1000) is settings


@pytest.mark.parametrize(
    "body, output",
    [
        ({"max_tokens": 20_000}, 20_000),
        ({"max_completion_tokens": 500}, 500),
        ({"max_output_tokens": 9}, 9),
        ({}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": "many"}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": True}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": -5}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": 10**12}, 10**12),
    ],
)
def test_the_output_room(body, output):
    assert cc.max_output(body) == output


def test_a_huge_output_limit_keeps_the_proxys_trigger():
    assert cc.settings_for(OffloadSettings(), model="gpt-4o", output=10**12).max_total_tokens == 18_000
