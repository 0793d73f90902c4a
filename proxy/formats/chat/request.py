"""Chat requests: the tools a client declares that collide with the injected ones."""

from __future__ import annotations

from typing import Any

from proxy.core.texts import INJECTED_TOOLS


def colliding_tool_names(body: Any) -> list[str]:
    """The injected tool names the client declares itself, in `tools` or legacy `functions`.

    The proxy then neither offloads nor injects for the request: two tools of one name must
    not go upstream, and a call to the client's own tool must reach the client.
    """
    if not isinstance(body, dict):
        return []
    declared: list[Any] = []
    for entry in _list(body.get("tools")):
        if isinstance(entry, dict):
            declared.append(entry.get("name"))  # flat form
            for kind in ("function", "custom"):
                if isinstance(entry.get(kind), dict):
                    declared.append(entry[kind].get("name"))
    declared += [entry.get("name") for entry in _list(body.get("functions")) if isinstance(entry, dict)]
    return sorted({name for name in declared if isinstance(name, str) and name in INJECTED_TOOLS})


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
