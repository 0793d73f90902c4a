"""Each format package exposes its `WireFormat` and what code outside it really needs, no more:
`__all__` is exactly its public surface (as httpx's tests/test_exported_members.py): the names
the rest of proxy/ and bench/ import from it or read off it (`from proxy.formats import
messages as anthropic`, then `anthropic.history`), over `_private` modules no one else imports."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import ModuleType

import pytest

from proxy.formats import chat, messages, responses
from tests.harness.surface import PROXY, imported_from, private_imports

PUBLIC = {
    chat: {"CHAT", "ChatFormat", "VIEW", "parse_chat_body", "USAGE"},
    messages: {
        "MESSAGES",
        "MessagesFormat",
        "without_emulated_betas",
        "history",
        "inject_tools",
        "messages_of",
        "EPHEMERAL",
        "STRATEGY",
        "cached_request",
        "with_caching",
        "body_from_chat",
        "items_with_offsets",
        "message_answer",
        "system_from_chat",
        "tools_from_chat",
        "instruction_message",
    },
    responses: {
        "RESPONSES",
        "ResponsesFormat",
        "TYPE",
        "compacted_response",
        "parse_compact_body",
        "summary_body",
        "check_responses_input",
        "inject_tools",
        "instruction_item",
        "items_from_chat",
        "items_from_message",
        "items_with_offsets",
        "tools_from_chat",
        "ResponsesView",
    },
}
USERS = [PROXY, PROXY.parent / "bench"]  # whose imports make the surface
# public beside what is read off the package: the format's class (what its object is an instance
# of), and a name read off a module chosen at run time (replay's `convert.tools_from_chat`)
BESIDE = {chat: {"ChatFormat"}, messages: {"MessagesFormat", "tools_from_chat"}, responses: {"ResponsesFormat"}}


def _files() -> list[Path]:
    return [p for root in USERS for p in root.rglob("*.py") if PROXY / "formats" not in p.parents]


def read_off(package: str) -> set[str]:
    """The names read off the package bound as a module (`from proxy.formats import chat`, `chat.VIEW`),
    and those imported from it (`from proxy.formats.chat import CHAT`), in proxy/ and bench/."""
    parent, _, name = package.rpartition(".")
    names: set[str] = set()
    for path in _files():
        tree = ast.parse(path.read_text(), str(path))
        bound = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == parent and not node.level
            for alias in node.names
            if alias.name == name
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == package and not node.level:
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                names.add(node.attr)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.BoolOp | ast.IfExp):
                # `(convert or _responses).items_with_offsets`: a name read off either module
                operands = (
                    node.value.values if isinstance(node.value, ast.BoolOp) else [node.value.body, node.value.orelse]
                )
                if any(isinstance(o, ast.Name) and o.id in bound for o in operands):
                    names.add(node.attr)
    return names


@pytest.mark.parametrize("package", PUBLIC, ids=lambda p: p.__name__)
def test_all_is_exactly_the_public_surface(package: ModuleType) -> None:
    assert set(package.__all__) == PUBLIC[package] and len(package.__all__) == len(PUBLIC[package])
    names = {n for n, value in vars(package).items() if not n.startswith("_") and not inspect.ismodule(value)}
    assert names == PUBLIC[package]  # nothing else imported into the package
    for name in package.__all__:
        assert getattr(package, name) is not None, name


@pytest.mark.parametrize("package", PUBLIC, ids=lambda p: p.__name__)
def test_the_surface_is_what_other_packages_use_of_it(package: ModuleType) -> None:
    assert imported_from(package.__name__) <= PUBLIC[package]
    assert read_off(package.__name__) == PUBLIC[package] - BESIDE[package]
    # the formats' shared modules are the formats' own (`context_threshold` reads the edits' bounds)
    outside = [found for found in private_imports(package.__name__) if not found.startswith("proxy/formats/")]
    assert outside == [], "other packages import the format, not its private modules"


@pytest.mark.parametrize("package", PUBLIC, ids=lambda p: p.__name__)
def test_the_format_is_public_with_its_capabilities(package: ModuleType) -> None:
    [name] = [n for n in package.__all__ if n.isupper() and n not in ("VIEW", "USAGE", "TYPE", "EPHEMERAL", "STRATEGY")]
    fmt = getattr(package, name)
    assert isinstance(fmt, getattr(package, type(fmt).__name__))
    assert hasattr(fmt, "compaction_emulation") and hasattr(fmt, "clearing_edits")
