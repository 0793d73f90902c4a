"""How the format-neutral core sees one wire format's history.

The planners (compaction, compression) work on a list of a format's own history items —
chat messages, Responses input items, Anthropic messages — through an `ItemView`, so they
never depend on a wire format and every format gets the same decisions: which tool results
leave the context, where history may be cut without separating a call from its result, and
what stands in for the summarised part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Role = str  # "system" | "user" | "assistant" | "tool" | "other"


@dataclass(frozen=True)
class MediaPart:
    """An image, document or audio part of an item, as the media planner (`proxy.core.media`) sees it."""

    kind: str  # "image" | "document" | "audio"
    inline: str | None  # its bytes as a data URL (what is stored, and given back); None: a URL, a file id
    billing: str = "openai"  # whose billing counts an image: "openai" | "anthropic"
    detail: str | None = None  # an OpenAI image's `detail`


class ItemView(Protocol):
    def role(self, item: Any) -> Role:
        """ "system" for system/developer instructions (never summarised), "tool" for a tool result."""
        ...

    def tool_text(self, item: Any) -> str | None:
        """The offloadable text of a tool result, or of an item that carries its own result (a
        Responses `mcp_call`): compaction offloads it. None: nothing to offload in this item."""
        ...

    def with_tool_text(self, item: Any, text: str) -> Any:
        """A copy of the tool result `item` whose offloadable text is `text` (ids, order kept)."""
        ...

    def text(self, item: Any) -> str | None:
        """The item's visible text, where the proxy's markers (and their refs) are looked for."""
        ...

    def calls(self, item: Any) -> tuple[str, ...]:
        """The ids of the tool calls this item makes."""
        ...

    def call_details(self, item: Any) -> tuple[tuple[str, str], ...]:
        """(name, arguments) of each tool call this item makes, the arguments as the model wrote
        them: a JSON object's text, or a custom tool's free-form input (e.g. a patch)."""
        ...

    def answers(self, item: Any) -> str | None:
        """The id of the tool call this item answers (a tool result), else None."""
        ...

    def attached(self, previous: Any, item: Any) -> bool:
        """`item` belongs with `previous` (a result after its call, an item after its reasoning):
        no cut may fall between them."""
        ...

    def injected_calls(self, item: Any) -> tuple[str, ...]:
        """The ids of this item's calls to the proxy's own reload tools (their results stay)."""
        ...

    def is_provider_compaction(self, item: Any) -> bool:
        """Is `item` a provider's compacted state (a Responses `compaction` item, a Messages
        message holding a `compaction` block)? Opaque: never summarised, compacted or moved, and
        the provider ignores what precedes it (`proxy.core.compaction`)."""
        ...

    def is_compaction_trigger(self, item: Any) -> bool:
        """Is `item` a request to compact now (Responses `compaction_trigger`, always last)?"""
        ...

    def media(self, item: Any) -> tuple[MediaPart, ...]:
        """The item's images, documents and audio parts, in order (inside its tool results too)."""
        ...

    def with_media(self, item: Any, markers: Mapping[int, str]) -> Any:
        """A copy of `item` whose media part k (in `media` order) is replaced by the text
        `markers[k]`, for every k given; everything else kept."""
        ...

    def summary_item(self, text: str) -> Any:
        """The item that stands for a summarised part of the history."""
        ...

    def transcript(self, item: Any) -> tuple[str, str]:
        """(a header such as "[user]" or "[assistant] calls f(x)", the text) for the summariser."""
        ...
