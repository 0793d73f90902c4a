"""The README's dashboard screenshots, reproducibly: the traces replayed into a running proxy,
then the page photographed in headless Chromium.

    .venv/bin/python bench/dashboard_demo.py [../shared/traces/traces.jsonl] [--out docs]

Starts the local fake upstream (`--reload-once`: its model reloads each offloaded result once,
so reload rounds show) and a proxy (embedded store, two tenants by proxy key, an admin token), replays the traces with `replay --target` (chat format as tenant `team-chat`, Anthropic
format as `team-claude`), then signs in as the admin (the page picks the window that fits the
data) and saves `dashboard.png` (all tenants) and
`dashboard-session.png` (one tenant's sessions and one session's turns) into `--out`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages
from bench.common import ROOT, SHARED, servers  # noqa: E402
from tests.harness.browser import browser, open_page  # noqa: E402

ADMIN = "admin-demo-token"
TENANTS = {"team-chat": ("pk-demo-chat", "chat"), "team-claude": ("pk-demo-claude", "anthropic")}


def replay(root: str, traces: Path, key: str, format: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy",
            "replay",
            str(traces),
            "--target",
            root,
            "--api-key",
            key,
            "--format",
            format,
            "--model",
            "gpt-4o" if format == "chat" else "claude-sonnet-4",
        ],
        check=True,
        cwd=ROOT,
    )


def settled(root: str) -> None:
    """Until the recorder has written every turn (it flushes about once a second): the count stops moving."""
    last = -1
    for _ in range(60):
        stats = httpx2.get(
            f"{root}/v1/offload/stats", params={"window": "1h"}, headers={"authorization": f"Bearer {ADMIN}"}
        ).json()
        if stats["totals"]["requests"] == last:
            return
        last = stats["totals"]["requests"]
        time.sleep(2)


def photograph(root: str, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    shots = [out / "dashboard.png", out / "dashboard-session.png"]
    with browser() as launched:
        page, console = open_page(launched, f"{root}/dashboard", width=1280, height=900)
        page.fill("#token", ADMIN)
        page.click("#signin button[type=submit]")
        page.wait_for_selector("body[data-loaded]")
        page.mouse.move(1, 1)  # no hover highlight left on a chart
        page.wait_for_timeout(500)
        page.screenshot(path=str(shots[0]), full_page=True)
        page.locator("#tenants-table tbody tr", has_text="team-chat").click()  # a whole row opens
        page.wait_for_selector("#sessions-table tbody tr.clickable")
        raw = [int(t.replace(",", "")) for t in page.locator("#sessions-table tbody td:nth-child(4)").all_inner_texts()]
        page.locator("#sessions-table tbody tr.clickable").nth(raw.index(max(raw))).click()  # the largest
        page.wait_for_selector("#session:not([hidden]) #chart-session svg")
        page.wait_for_timeout(500)
        page.mouse.move(1, 1)
        top = page.evaluate("() => document.getElementById('session').getBoundingClientRect().top + window.scrollY")
        page.screenshot(path=str(shots[1]), full_page=True, clip={"x": 0, "y": top - 8, "width": 1280, "height": 560})
        if console.errors:
            raise SystemExit(f"the page logged errors: {console.errors}")
    return shots


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("traces", nargs="?", default=str(SHARED / "traces" / "traces.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "docs"))
    args = parser.parse_args()
    traces = Path(args.traces)
    tenants = Path(tempfile.mkdtemp(prefix="demo-")) / "tenants.toml"
    tenants.write_text("".join(f'[tenants.{name}]\napi_keys = ["{key}"]\n' for name, (key, _) in TENANTS.items()))
    with servers("--tenants-file", str(tenants), "--admin-token", ADMIN, upstream_args=("--reload-once",)) as (
        _,
        base,
        _proxy,
    ):
        root = base.removesuffix("/v1")
        for key, format in TENANTS.values():
            replay(root, traces, key, format)
        settled(root)
        for shot in photograph(root, Path(args.out)):
            print("wrote", shot)


if __name__ == "__main__":
    main()
