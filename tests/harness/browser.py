"""A real headless Chromium for page tests: Debian's `chromium` (or $CHROMIUM), driven by
Playwright pointed at that binary (Playwright's own browser downloads are never used).

`scripts/test` installs the package when it is missing and the machine can (apt-get as root). Where no
browser can be found the page tests fail under CI (CI=true) and are skipped elsewhere, listed at the
end of the run (tests/harness/prerequisites.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.harness.prerequisites import require

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".cache" / "screenshots"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str | None:
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


def require_chromium() -> str:
    path = chromium_path()
    require(
        path is not None,
        "Chromium",
        "none found (set $CHROMIUM, or `apt-get install chromium`; scripts/test "
        "installs it when it runs as root on Debian or Ubuntu)",
    )
    assert path is not None
    return path


@dataclass
class Console:
    """What a page said on its console and the errors it threw."""

    messages: list[tuple[str, str]] = field(default_factory=list)

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [(kind, text) for kind, text in self.messages if kind in ("error", "pageerror")]


@contextmanager
def browser() -> Iterator[object]:
    """A launched headless Chromium (a Playwright Browser)."""
    from playwright.sync_api import sync_playwright

    executable = require_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield launched
        finally:
            launched.close()


def open_page(launched, url: str, *, width: int = 1280, height: int = 900):
    """A new page (its own context: no storage shared with other pages) at `url`; (page, console)."""
    context = launched.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    console = Console()
    page.on("console", lambda m: console.messages.append((m.type, m.text)))
    page.on("pageerror", lambda e: console.messages.append(("pageerror", str(e))))
    page.goto(url)
    return page, console


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
