"""The emulation sits below the HTTP layer: the HTTP layer calls it, never the other way round."""

from __future__ import annotations

from pathlib import Path

import proxy.emulation
from tests.unit.core.test_purity import imported_modules


def test_the_emulation_imports_nothing_of_the_http_layer():
    files = sorted(Path(proxy.emulation.__file__).parent.glob("*.py"))
    assert len(files) >= 6
    for path in files:
        bad = {m for m in imported_modules(path) if m.startswith(("proxy.http", "starlette"))}
        assert not bad, f"{path.name} imports {bad}"
