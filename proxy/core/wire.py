"""The wire-format interface: what the HTTP layer asks of a managed API (chat, responses, …).

One `WireFormat` per managed endpoint: it parses a request body, reads the history the core
reduces and writes the reduced history back (byte-stable: every other key kept, in order),
names the tools a client declares that collide with the injected ones, makes the
`Rounds` (`proxy.core.rounds`) of one request for the reload loop, and asks for a summary the
way the conversation itself is sent (`summary_request`, `summary_answer`).

`WireFormat` asks only what every format can do. What only some can do is a capability of its
own, a small Protocol a format hands out or not (`compaction_emulation`, `clearing_edits`:
None when it has none): the type checker, not a runtime error, keeps the turn from asking a
format for what it lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from proxy.core.answers import UsageReader
from proxy.core.compaction import Edited, Expanded, ProviderContext, Records, Threshold
from proxy.core.jsonio import JsonObject
from proxy.core.rounds import Rounds
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView


class ProviderCompaction(Protocol):
    """What the proxy does in place of a provider's compaction (a Responses `compaction` item
    and `compaction_trigger`, a Messages `compaction` block and `compact_20260112`), for a format
    that has one (`WireFormat.compaction_emulation`). The turn does the format-neutral steps
    (`proxy.turn._context_management`, `proxy.turn._context_management`): the stores and the summariser."""

    records_api: str  # whose items its compaction records hold (`CompactionRecords.api`)

    def threshold(self, asked: Any) -> Threshold | None:
        """The threshold compaction a request's `context_management` asks for (None: none);
        the HTTP layer's 400 error for a malformed one."""

    def settles(self, body: dict[str, Any], path: str) -> bool:
        """Does `path` (`proxy.core.compaction.sealed_fields`) name the `encrypted_content`
        of a compaction position of `body`, one the format settles (`expand`)?"""

    async def expand(
        self, body: dict[str, Any], items: list[Any], records: Records, *, emulating: bool
    ) -> Expanded | None:
        """The request with the proxy's compaction tokens replaced by what they stand for, and
        the provider's settled as the format's rule says; None when nothing changed."""

    def record(self, reduced: list[Any]) -> list[Any]:
        """What a compaction's token stands for, of the reduced history forwarded now."""

    def lead(self, summary: str, token: str) -> dict[str, Any]:
        """The compaction the answer opens with (`summary`: the proxy's, `token`: its record's)."""

    def compacts_now(self, body: dict[str, Any], items: list[Any]) -> bool:
        """Does the request ask for a compaction now, no turn (a Responses `compaction_trigger`)?
        The 400 error for one the proxy cannot take."""

    def rounds(
        self,
        body: dict[str, Any],
        items: list[Any],
        tools: Sequence[dict[str, Any]],
        *,
        extra_usage: dict[str, Any] | None,
        lead: Sequence[dict[str, Any]],
    ) -> Rounds:
        """`WireFormat.rounds`, with `lead` (the proxy's compaction) first in the answer."""

    def paused_answer(
        self, lead: list[dict[str, Any]], *, body: dict[str, Any], created_at: int, tokens_in: int, tokens_out: int
    ) -> dict[str, Any]:
        """The answer the proxy gives alone, no upstream turn asked: `lead` as the whole output,
        the compaction's usage (a Messages `pause_after_compaction`, a `compaction_trigger`)."""

    def paused_events(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        """`paused_answer`'s answer as the format streams it (its typed SSE events, in order)."""


class ClearingEdits(Protocol):
    """Anthropic's clearing edits applied by the proxy (`WireFormat.clearing_edits`; the
    stores are the turn's, `proxy.turn._context_management`)."""

    def apply(
        self,
        asked: Any,
        items: list[Any],
        *,
        counter: TokenCounter,
        namespace: str,
        fixed_tokens: int,
        tool_uses: bool = True,
    ) -> Edited:
        """`items` with the edits of `asked` (the request's `context_management`) applied; the
        HTTP layer's 400 error for a malformed one. `tool_uses` False: thinking only."""


class WireFormat(Protocol):
    """Everything the layers above ask of a format is asked here: no code outside
    `proxy.formats` tests which format it holds."""

    endpoint: str  # the upstream path under /v1, e.g. "chat/completions"
    stored: bool  # may a request continue state stored upstream (previous_response_id, conversation)?
    usage: UsageReader  # the bill of its answers, streamed and not (`proxy.core.answers`)

    @property
    def view(self) -> ItemView:
        """How the planners see its history (each format's own `ItemView`)."""

    @property
    def compaction_emulation(self) -> ProviderCompaction | None:
        """What the proxy does in place of its provider's compaction; None: it has none."""

    @property
    def clearing_edits(self) -> ClearingEdits | None:
        """Its provider's clearing edits, applied by the proxy; None: it has none."""

    def parse(self, raw: bytes, *, max_items: int | None) -> JsonObject:
        """The body as a JSON object; raises the HTTP layer's 400 error for a malformed one."""

    def history(self, body: JsonObject) -> list[Any]: ...

    def with_history(self, body: JsonObject, items: list[Any]) -> JsonObject: ...

    def colliding_tool_names(self, body: JsonObject) -> set[str]: ...

    def with_prompt_cache(
        self, body: JsonObject, *, key: str | None, mentions: Callable[[bytes], bool] | None = None
    ) -> JsonObject:
        """`body` with the prompt caching the proxy adds for a client that asked for none
        (`--cache-control auto`): Anthropic's `cache_control`, or OpenAI's `prompt_cache_key`
        `key` (None: the upstream takes none). `body` itself when there is nothing to add.
        `mentions(b'"name"')`: False when the body's bytes hold no such key (`RawJson.may_hold`),
        a search of the bytes instead of a walk of the body; None: walk it."""

    def provider_context(self, body: JsonObject) -> ProviderContext:
        """What the request asks the provider to do with its context (`context_management`, a
        `compaction_trigger`): the planners step aside where the provider acts."""

    def rounds(
        self,
        body: JsonObject,
        items: list[Any],
        tools: Sequence[JsonObject],
        *,
        extra_usage: JsonObject | None,
    ) -> Rounds:
        """`tools`: the injected tools' chat-style schemas; `extra_usage`: chat-shaped."""

    def summary_request(
        self, body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
    ) -> tuple[str, JsonObject]:
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
