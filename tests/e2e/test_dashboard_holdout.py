"""The dashboard's holdout panel in headless Chromium: hidden without a holdout; with one, each
figure per arm with its difference and interval, and a verdict that says plainly when there are
too few sessions to tell."""

from __future__ import annotations

import json
import time
import uuid

import httpx2

from proxy.stats._sessions import FIGURE_LABELS
from tests.e2e.test_dashboard import column, fmt_usd, sign_in
from tests.e2e.test_holdout import ROUTES, SMALL, auth, body_of, holdout_of, namespace_of, sessions_in
from tests.harness.browser import open_page, screenshot


def test_the_holdout_panel_compares_the_arms_and_says_when_there_are_too_few(make_proxy, upstream, chromium):
    key = f"sk-{uuid.uuid4().hex}"
    with make_proxy() as url:  # no holdout: no panel
        page, console = open_page(chromium, f"{url}/dashboard#window=1h")
        httpx2.post(
            url + ROUTES["chat"], json=body_of("chat", stream=False, steps=1), headers=auth("chat", key), timeout=30
        )
        sign_in(page, key)
        assert page.locator("#holdout").is_hidden()
    with make_proxy(holdout=0.5) as url:
        namespace = namespace_of(url, key)
        raw = json.dumps(body_of("chat", stream=False, steps=4)).encode()
        for name in sessions_in(namespace, 0.5, "control", 2) + sessions_in(namespace, 0.5, "managed", 3):
            r = httpx2.post(
                url + ROUTES["chat"],
                content=raw,
                headers={**auth("chat", key), **SMALL, "X-Offload-Session": name},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        section = holdout_of(url, key, sessions=5)
        time.sleep(0.5)
        page, console = open_page(chromium, f"{url}/dashboard#window=1h")
        sign_in(page, key)
        page.wait_for_selector("#holdout:not([hidden])")
        assert column(page, "holdout-table", 1) == [label for label, _ in FIGURE_LABELS.values()]
        cost = next(f for f in section["figures"] if f["figure"] == "cost")
        assert column(page, "holdout-table", 2)[0] == fmt_usd(cost["control"])
        assert set(column(page, "holdout-table", 6)) == {"too few sessions"}
        assert page.inner_text("#holdout-verdict").startswith("Too few sessions to tell: 2 control and 3 managed")
        assert "at least 30 in each arm" in page.inner_text("#holdout-sessions")
        print("screenshot:", screenshot(page, "dashboard-holdout-1280"))
        assert console.errors == []
