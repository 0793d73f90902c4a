"""The README stays a short front page, and every relative link in it and in docs/ resolves:
to an existing file and, for `#anchor`, to a heading of that file (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def prose(text: str) -> str:
    """The text outside fenced code blocks (a `#` line in a shell block is no heading)."""
    return FENCE.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation other than '-' and '_' removed,
    each space a '-'. Inline markup goes as punctuation does; a link keeps its text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(prose(path.read_text())):
        base = anchor(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    text = INLINE_CODE.sub("", prose(path.read_text()))
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I)]


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move reference text to docs/"


def test_the_docs_pages_exist():
    assert len(PAGES) > 1
    readme_links = {target.split("#")[0] for target in relative_links(ROOT / "README.md")}
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme_links, f"the README's table of contents misses {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in relative_links(page):
        file_part, _, fragment = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{fragment} in {linked.name}")
    assert not broken, broken


def test_anchor_rule():
    assert anchor("Anthropic Messages / Claude Code") == "anthropic-messages--claude-code"
    assert anchor("Compression (modes `compress` and `auto`)") == "compression-modes-compress-and-auto"
    assert anchor("Savings on your own traffic: `replay`") == "savings-on-your-own-traffic-replay"
    assert anchor("snake_case and-dash") == "snake_case-and-dash"


def test_a_broken_link_is_found(tmp_path: Path):
    (tmp_path / "a.md").write_text(
        "# Title\n\n```bash\n# not a heading\n```\n\n[ok](#title) [bad](#not-a-heading)"
        " [gone](b.md) `[code](c.md)` [web](https://example.com)\n"
    )
    targets = relative_links(tmp_path / "a.md")
    assert targets == ["#title", "#not-a-heading", "b.md"]
    assert anchors(tmp_path / "a.md") == {"title"}


def test_the_fake_upstream_recipes_bill():
    """A recipe that starts the bundled fake upstream passes --bill, as `scripts/demo` does: without it
    each turn reports a fixed few tokens while the summary calls report their size, so the dashboard's
    bill has the proxy costing many times the raw history's estimate (a negative saving)."""
    recipes = [
        (page.name, line)
        for page in PAGES
        for line in page.read_text().splitlines()
        if re.search(r"proxy\.demo\.fake_upstream (\d+|PORT)", line)
    ]
    assert recipes
    for name, line in recipes:
        assert "--bill" in line, f"{name}: {line.strip()}"


# A path of this repository's code named in the docs (`proxy/core/wire.py`, `tests/unit/…`), or a
# module named dotted (`proxy.core.wire`, `proxy.core.wire.WireFormat`): after modules move, the
# name must still lead somewhere. Paths under tests/ only below its own folders (the docs quote
# an agent's `tests/test_api.py` in examples).
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:proxy|bench|scripts|deploy|tests/(?:unit|e2e|harness|project))/[\w/.-]*\w)(?![\w/-])"
)
DOTTED = re.compile(r"(?<![\w.-])(proxy(?:\.\w+)+)(?!\.?\w)")
FILE_NAMES = {"json", "jsonl", "log", "yml", "yaml", "txt", "sqlite3", "toml"}  # `proxy.log`: a file


def named_code(text: str) -> tuple[list[str], list[str]]:
    return REPO_PATH.findall(text), DOTTED.findall(text)


def _resolves(dotted: str) -> bool:
    """`dotted` is a module of the repository, or a name its longest module prefix holds."""
    parts = dotted.split(".")
    if parts[-1] in FILE_NAMES:
        return True
    for k in range(len(parts), 0, -1):
        stem = ROOT.joinpath(*parts[:k])
        source = stem.with_suffix(".py") if stem.with_suffix(".py").exists() else stem / "__init__.py"
        if source.exists():
            return k == len(parts) or re.search(rf"\b{re.escape(parts[k])}\b", source.read_text()) is not None
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_path_and_module_named_exists(page: Path):
    paths, modules = named_code(page.read_text())
    missing = [p for p in paths if not (ROOT / p).exists()]
    missing += [m for m in modules if not _resolves(m)]
    assert not missing, f"{page.name} names code that is not there: {sorted(set(missing))}"


def test_a_stale_module_name_is_found():
    text = "see `proxy/core/gone.py`, proxy.core.gone.X, proxy.core.wire.WireFormat, offload-proxy/scripts/x"
    paths, modules = named_code(text + " and proxy.json")
    assert paths == ["proxy/core/gone.py"]
    assert [_resolves(m) for m in modules] == [False, True, True]
    assert not (ROOT / paths[0]).exists()


def test_the_architecture_layout_names_every_module():
    """docs/architecture.md's layout (the code block drawing proxy/) names each module of
    proxy/ (case aside, a private module without its underscore): a module merged, moved or
    added shows in it."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("```\nproxy/")
    drawing = text[start : text.index("```", start + 3)].lower()
    missing = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "proxy").rglob("*.py"))
        if path.stem not in ("__init__", "__main__")
        and not re.search(rf"(?<![\w])_?{re.escape(path.stem.lstrip('_').lower())}(?![\w])", drawing)
    ]
    assert not missing, f"docs/architecture.md's layout does not name {missing}"
