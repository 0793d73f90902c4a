"""The wire-format interface: what the HTTP layer asks of a managed API (chat, responses, …).

One `WireFormat` per managed endpoint: it parses a request body, reads the history the core
reduces and writes the reduced history back (byte-stable: every other key kept, in order),
names the tools a client declares that collide with the injected ones, makes the
`Rounds` (`proxy.core.rounds`) of one request for the reload loop, and asks for a summary the
way the conversation itself is sent (`summary_request`, `summary_answer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from proxy.core.bill import UsageReader
from proxy.core.provider_context import ProviderContext
from proxy.core.rounds import Rounds
from proxy.core.view import ItemView

# Where a format's history carries a provider compaction (`proxy.emulation`): Responses
# `compaction` items (their `encrypted_content` a token), Messages `compaction` blocks, or nowhere.
Compaction = Literal["items", "blocks"] | None


class WireFormat(Protocol):
    """Everything the layers above ask of a format is asked here: no code outside
    `proxy.formats` tests which format it holds."""

    endpoint: str  # the upstream path under /v1, e.g. "chat/completions"
    stored: bool  # may a request continue state stored upstream (previous_response_id, conversation)?
    compaction: Compaction  # the shape of a provider compaction in its history
    records_api: str  # whose items its compaction records hold (`CompactionRecords.api`)
    clearing_edits: bool  # does it have Anthropic's clearing edits (`proxy.emulation.edits`)?
    usage: UsageReader  # the bill of its answers, streamed and not (`proxy.core.bill`)

    @property
    def view(self) -> ItemView:
        """How the planners see its history (each format's own `ItemView`)."""

    def parse(self, raw: bytes, *, max_items: int | None) -> dict:
        """The body as a JSON object; raises the HTTP layer's 400 error for a malformed one."""

    def history(self, body: dict) -> list[Any]: ...

    def with_history(self, body: dict, items: list[Any]) -> dict: ...

    def colliding_tool_names(self, body: dict) -> set[str]: ...

    def with_prompt_cache(self, body: dict, *, key: str | None) -> dict:
        """`body` with the prompt caching the proxy adds for a client that asked for none
        (`--cache-control auto`): Anthropic's `cache_control`, or OpenAI's `prompt_cache_key`
        `key` (None: the upstream takes none). `body` itself when there is nothing to add."""

    def provider_context(self, body: dict) -> ProviderContext:
        """What the request asks the provider to do with its context (`context_management`, a
        `compaction_trigger`): the planners step aside where the provider acts."""

    def rounds(
        self,
        body: dict,
        items: list[Any],
        tools: Sequence[dict],
        *,
        extra_usage: dict | None,
        lead: Sequence[dict] = (),
    ) -> Rounds:
        """`tools`: the injected tools' chat-style schemas; `extra_usage`: chat-shaped; `lead`: the
        proxy's own output (Responses items, Messages blocks) first in the answer (an emulated
        compaction); chat completions have none."""

    def paused_answer(self, lead: list[dict], *, body: dict, created_at: int, tokens_in: int, tokens_out: int) -> dict:
        """The answer the proxy gives alone, no upstream turn asked: `lead` (its emulated
        compaction) as the whole output, the compaction's usage (`Inline.paused`: a Messages
        `pause_after_compaction`, a Responses `compaction_trigger`). ValueError for a format
        without one (chat completions)."""

    def paused_events(self, answer: dict) -> list[dict]:
        """`paused_answer`'s answer as the format streams it (its typed SSE events, in order)."""

    def summary_request(
        self, body: dict, prefix: list[Any], instruction: str, *, tools: Sequence[dict], model: str
    ) -> tuple[str, dict]:
        """(endpoint under /v1, body) of the request asking for a summary of `prefix`.

        `body` is the client's request; `prefix` the items a turn forwarded first (sent byte for
        byte, so a provider's prompt cache serves them), followed by `instruction` as one user
        message; `tools` the injected tools' chat-style schemas when the turn carried them (added
        as the turn adds them: the tools too are byte-identical). No tool may be called, nothing
        is streamed, stored or continued, and the keys that would shape or bound the answer are
        left out; `model` replaces the request's."""

    def summary_answer(self, answer: Any) -> tuple[str, int, int]:
        """(text, input tokens, output tokens) of the upstream's answer to `summary_request`;
        ValueError for an answer without that shape."""
