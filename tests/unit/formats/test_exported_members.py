"""Each format package exposes its `WireFormat` and what code outside it really needs, no more:
`__all__` is exactly its public surface (as httpx's tests/test_exported_members.py)."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from proxy.formats import chat, messages, responses

PUBLIC = {
    chat: {"CHAT", "ChatFormat", "VIEW"},
    messages: {"MESSAGES", "MessagesFormat", "without_emulated_betas", "history", "inject_tools", "messages_of"},
    responses: {"RESPONSES", "ResponsesFormat"},
}


@pytest.mark.parametrize("package", PUBLIC, ids=lambda p: p.__name__)
def test_all_is_exactly_the_public_surface(package: ModuleType) -> None:
    assert set(package.__all__) == PUBLIC[package] and len(package.__all__) == len(PUBLIC[package])
    names = {n for n, value in vars(package).items() if not n.startswith("_") and not inspect.ismodule(value)}
    assert names == PUBLIC[package]  # nothing else imported into the package


@pytest.mark.parametrize("package", PUBLIC, ids=lambda p: p.__name__)
def test_the_format_is_public_with_its_capabilities(package: ModuleType) -> None:
    [name] = [n for n in package.__all__ if n.isupper() and n != "VIEW"]
    fmt = getattr(package, name)
    assert isinstance(fmt, getattr(package, type(fmt).__name__))
    assert hasattr(fmt, "compaction_emulation") and hasattr(fmt, "clearing_edits")
