"""The Compressor (`proxy.offload.summaries`): what it is built from stays as built."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.formats.messages import MESSAGES
from proxy.offload.records import TenantStore
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import DEFAULT_INSTRUCTION, DEFAULT_PROMPT, SummaryContext
from proxy.store.memory import MemoryStore
from proxy.store.sealing import Sealer


def context(**changes: object) -> SummaryContext:
    ctx = SummaryContext(
        upstream=None,  # type: ignore[arg-type]  # never called: nothing is summarised here
        headers=[],
        model="claude-sonnet-4-5",
        prompt=DEFAULT_PROMPT,
        timeout=30.0,
        wait=5.0,
        view=MESSAGES.view,
        wire=MESSAGES,
        body={"model": "claude-sonnet-4-5", "messages": []},
        summary_request="prefix",
        instruction=DEFAULT_INSTRUCTION,
    )
    return dataclasses.replace(ctx, **changes)  # type: ignore[arg-type]


def test_the_summary_context_is_not_changed_after_construction():
    with pytest.raises(dataclasses.FrozenInstanceError):
        context().instruction = "something else"  # type: ignore[misc]


def test_a_threshold_s_instructions_make_a_compressor_of_their_own_versioned_by_them():
    tenant = TenantStore(MemoryStore(), "tenant-a", 3600, Sealer(None))
    default = Compressor(tenant, context())
    custom = default.with_instruction("Keep every file path.")
    assert custom.ctx.instruction == "Keep every file path."
    assert default.ctx.instruction == DEFAULT_INSTRUCTION  # the request's own compressor unchanged
    assert custom.version != default.version  # a summary made under other instructions is not reused
    assert default.with_instruction(DEFAULT_INSTRUCTION).version == default.version
